package plan

import (
	"fmt"
	"time"
)

// ForceArm is the node's agent's mark that it holds the cluster's recovery
// Lease for a person's --force-new-cluster request (memberruntime.ArmFile):
// the gate uses a request only while it is armed, so two requests on two
// members of one cluster are never both used (two clusters under one ID):
// one Lease, one holder (docs/design.md §5 and §7).
type ForceArm struct {
	MemberID    uint64
	RequestedAt time.Time
	// Holder is the Lease's holder; Until the time up to which the agent
	// confirmed, before it wrote the mark, that no other can take the
	// Lease (the node's clock: the gate reads it on the same node).
	Holder string
	Until  time.Time
}

// Request is the request the mark is for.
func (a ForceArm) Request() ForceNewClusterRequest {
	return ForceNewClusterRequest{MemberID: a.MemberID, RequestedAt: a.RequestedAt}
}

// ForceArmMarkMaxAhead bounds how far ahead of the gate's clock a mark's
// Until may be: a mark is written valid for at most ForceArmValidFor, so a
// later one says the node's clock stepped back since (the fence it stands
// for is shorter than it says).
const ForceArmMarkMaxAhead = ForceArmValidFor + 5*time.Second

// ForceArmValidFor caps how long a mark is valid after its fence.
const ForceArmValidFor = 15 * time.Second

// Arms says whether a is the mark of req, valid at now.
func (a ForceArm) Arms(req ForceNewClusterRequest, now time.Time) bool {
	return a.Request().Is(req) && !now.After(a.Until) && a.Until.Sub(now) <= ForceArmMarkMaxAhead
}

// ForceArmAction is what the agent does about a request.
type ForceArmAction int

const (
	// ForceArmNothing: nothing held, nothing to arm.
	ForceArmNothing ForceArmAction = iota
	// ForceArmArm: take (or keep) the cluster's Lease, confirm it and
	// write the mark valid for a while more.
	ForceArmArm
	// ForceArmHold: the gate used the mark's request: keep the Lease until
	// the forced member serves with a quorum (no time limit: while the
	// majority is lost no heal needs it, and another member's request must
	// not be armed while the forced one may still start; a person frees it
	// by deleting the Lease, docs/management-nodes.md).
	ForceArmHold
	// ForceArmDisarm: set the mark aside (the gate uses nothing after it)
	// and keep the Lease until the mark's time is over: a gate that read
	// it just before may be using its request.
	ForceArmDisarm
	// ForceArmWait: a mark set aside, its time not over: keep the Lease.
	ForceArmWait
	// ForceArmRelease: remove the mark, set aside or not, and let go of
	// the Lease.
	ForceArmRelease
)

// ForceArmReleaseSlack is how long after a mark's Until the Lease is kept
// once the mark is set aside (the node's clock read twice; the gate sets a
// request aside before Until or not at all, gate.withForceNewCluster).
const ForceArmReleaseSlack = 5 * time.Second

// ForceArmInput is what the agent saw at one poll.
type ForceArmInput struct {
	Now time.Time
	// Request is the person's request (nil: none); RequestErr says why it
	// cannot be read (the gate sets such a request aside).
	Request    *ForceNewClusterRequest
	RequestErr string
	// Mark is the latest mark the agent wrote (nil: none): in force
	// (Live: the gate may read it) or set aside (on disk, or remembered
	// when the disk refused).
	Mark *ForceArm
	Live bool
	// UsedAt is when the gate set the Mark's request aside as used (zero:
	// it did not), read afresh at every poll.
	UsedAt time.Time
	// Held: this agent holds the Lease as the arm.
	Held bool
	// The agent's verdict over its polls, and its member list.
	MajorityLost bool
	Voter        bool
	MemberID     uint64 // the member as the agent knows it (0: unknown)
	ClusterID    uint64 // the Lease's cluster (0: unknown)
	JournalOpen  bool
}

// ForceArmDecision: the action, and why (said to the person beside the
// request when it is not armed).
type ForceArmDecision struct {
	Action ForceArmAction
	Why    string
}

// DecideForceArm says whether the agent arms a person's --force-new-cluster
// request, and when it lets go of the cluster's Lease. It arms only what
// the gate could use on the agent's own word (plan.DecideForceNewCluster):
// the request of this member, fresh, a voter, the majority lost, no
// recovery open; the Lease is the fence the gate cannot take itself. Every
// state that holds the Lease has an end: a quorum seen, or a mark's time
// over.
func DecideForceArm(in ForceArmInput) ForceArmDecision {
	if m := in.Mark; m != nil && !in.UsedAt.IsZero() {
		if !in.MajorityLost {
			return ForceArmDecision{Action: ForceArmRelease, Why: "the forced member serves with a quorum"}
		}
		return ForceArmDecision{Action: ForceArmHold, Why: fmt.Sprintf("the gate used member %x's request of %s: the Lease is held until the forced member serves with a quorum",
			m.MemberID, m.RequestedAt.UTC().Format(time.RFC3339))}
	}
	why, armable := armable(in)
	m := in.Mark
	if armable && m != nil && !m.Request().Is(*in.Request) && !in.Now.After(m.Until.Add(ForceArmReleaseSlack)) {
		// Another request's mark first runs out its time: a use of it
		// in that time must be seen (the hold), never replaced.
		armable, why = false, fmt.Sprintf("the mark of the request of %s is in force until %s", m.RequestedAt.UTC().Format(time.RFC3339), m.Until.Add(ForceArmReleaseSlack).UTC().Format(time.RFC3339))
	}
	if armable {
		return ForceArmDecision{Action: ForceArmArm, Why: why}
	}
	switch {
	case m == nil && in.Held: // a take whose fence failed: no mark was written
		return ForceArmDecision{Action: ForceArmRelease, Why: why}
	case m == nil:
		return ForceArmDecision{Why: why}
	case in.Now.After(m.Until.Add(ForceArmReleaseSlack)), m.Until.Sub(in.Now) > ForceArmMarkMaxAhead: // the gate takes it as none
		return ForceArmDecision{Action: ForceArmRelease, Why: why}
	case in.Live:
		return ForceArmDecision{Action: ForceArmDisarm, Why: why}
	}
	return ForceArmDecision{Action: ForceArmWait, Why: why}
}

// armable: whether the request may be armed, or why not.
func armable(in ForceArmInput) (string, bool) {
	if in.RequestErr != "" {
		return "the request cannot be read: " + in.RequestErr, false
	}
	if in.Request == nil {
		if in.Mark != nil {
			return "the armed request was withdrawn or refused", false
		}
		return "", false
	}
	req := *in.Request
	switch age := in.Now.Sub(req.RequestedAt); {
	case age > ForceNewClusterFreshFor || age < -time.Minute:
		return fmt.Sprintf("it was written at %s (at most %s before its use)", req.RequestedAt.UTC().Format(time.RFC3339), ForceNewClusterFreshFor), false
	case in.MemberID == 0 || in.MemberID != req.MemberID:
		return fmt.Sprintf("it names member %x; this agent's member is %x", req.MemberID, in.MemberID), false
	case in.ClusterID == 0:
		return "the member's cluster is not known: no Lease to hold", false
	case in.JournalOpen:
		return "a recovery is open", false
	case !in.MajorityLost:
		return "the agent does not see the majority lost", false
	case !in.Voter:
		return "the agent's member list does not have it as a voter", false
	}
	return fmt.Sprintf("member %x's request of %s, the majority lost", req.MemberID, req.RequestedAt.UTC().Format(time.RFC3339)), true
}
