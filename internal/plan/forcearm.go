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

// Arms says whether a is the mark of req, valid at now.
func (a ForceArm) Arms(req ForceNewClusterRequest, now time.Time) bool {
	return a.MemberID == req.MemberID && a.RequestedAt.Equal(req.RequestedAt) && !now.After(a.Until)
}

// ForceArmAction is what the agent does about a request.
type ForceArmAction int

const (
	// ForceArmNothing: no request and no mark.
	ForceArmNothing ForceArmAction = iota
	// ForceArmArm: take (or keep) the cluster's Lease, confirm it and
	// write the mark valid for a while more.
	ForceArmArm
	// ForceArmHold: the gate used the request; keep the Lease (no mark)
	// until the forced member serves with a quorum, so that no other
	// member's request is armed meanwhile and the other members' agents
	// rejoin them one at a time after it.
	ForceArmHold
	// ForceArmDisarm: remove the mark; the Lease is kept until the
	// mark's Until has passed (Disarmed, below): a gate that read the mark
	// just before its removal may be using the request.
	ForceArmDisarm
	// ForceArmRestoreHold: a gate used the request of a mark removed
	// meanwhile: the mark goes back, and the hold follows.
	ForceArmRestoreHold
	// ForceArmRelease: let go of the Lease kept after a disarm.
	ForceArmRelease
)

// ForceArmReleaseSlack is how long after a removed mark's Until the
// Lease is kept (the gate's rename of a request it used, the node's
// clock read twice).
const ForceArmReleaseSlack = 5 * time.Second

// ForceArmHoldAfterUse bounds the hold after the gate used a request: a
// forced member that never serves must not keep the cluster's Lease.
const ForceArmHoldAfterUse = 3 * time.Minute

// ForceArmInput is what the agent saw at one poll.
type ForceArmInput struct {
	Now time.Time
	// Request is the person's request (nil: none); RequestErr says why it
	// cannot be read (the gate sets such a request aside).
	Request    *ForceNewClusterRequest
	RequestErr string
	// Armed is the mark the agent wrote (nil: none).
	Armed *ForceArm
	// UsedAt is when the gate set the armed request aside as used (zero:
	// it did not).
	UsedAt time.Time
	// The agent's verdict over its polls, and its member list.
	MajorityLost bool
	Voter        bool
	MemberID     uint64 // the member as the agent knows it (0: unknown)
	ClusterID    uint64 // the Lease's cluster (0: unknown)
	JournalOpen  bool
	// Disarmed is a mark removed while the Lease is kept (nil: none);
	// DisarmedUsedAt when the gate set its request aside as used (zero:
	// it did not).
	Disarmed       *ForceArm
	DisarmedUsedAt time.Time
}

// ForceArmDecision: the action, and why (said to the person beside the
// request when it is not armed).
type ForceArmDecision struct {
	Action ForceArmAction
	Why    string
	// ReleaseNow: a disarm after the gate used the request lets go of the
	// Lease at once (no gate can use that request again: it is set aside).
	ReleaseNow bool
}

// DecideForceArm says whether the agent arms a person's --force-new-cluster
// request. It arms only what the gate could use on the agent's own word
// (plan.DecideForceNewCluster): the request of this member, fresh, a voter,
// the majority lost, no recovery open; the Lease is the fence the gate
// cannot take itself.
func DecideForceArm(in ForceArmInput) ForceArmDecision {
	d := decideArm(in)
	if in.Disarmed == nil || d.Action != ForceArmNothing {
		return d
	}
	switch {
	case !in.DisarmedUsedAt.IsZero():
		return ForceArmDecision{Action: ForceArmRestoreHold, Why: fmt.Sprintf("the gate used member %x's request of %s as its mark was removed: held until the forced member serves with a quorum",
			in.Disarmed.MemberID, in.Disarmed.RequestedAt.UTC().Format(time.RFC3339))}
	case in.Now.After(in.Disarmed.Until.Add(ForceArmReleaseSlack)):
		return ForceArmDecision{Action: ForceArmRelease, Why: d.Why}
	}
	return d // kept until then
}

func decideArm(in ForceArmInput) ForceArmDecision {
	disarm := func(format string, a ...any) ForceArmDecision {
		act := ForceArmNothing
		if in.Armed != nil {
			act = ForceArmDisarm
		}
		return ForceArmDecision{Action: act, Why: fmt.Sprintf(format, a...)}
	}
	if in.Request == nil && in.RequestErr == "" {
		switch {
		case in.Armed == nil:
			return ForceArmDecision{}
		case in.UsedAt.IsZero():
			return disarm("the armed request was withdrawn or refused")
		case !in.MajorityLost:
			d := disarm("the forced member serves with a quorum")
			d.ReleaseNow = true
			return d
		case in.Now.Sub(in.UsedAt) > ForceArmHoldAfterUse:
			d := disarm("the forced member does not serve with a quorum %s after its start", ForceArmHoldAfterUse)
			d.ReleaseNow = true
			return d
		}
		return ForceArmDecision{Action: ForceArmHold, Why: "the gate used the request: held until the forced member serves with a quorum"}
	}
	if in.RequestErr != "" {
		return disarm("the request cannot be read: %s", in.RequestErr)
	}
	req := *in.Request
	switch age := in.Now.Sub(req.RequestedAt); {
	case age > ForceNewClusterFreshFor || age < -time.Minute:
		return disarm("it was written at %s (at most %s before its use)", req.RequestedAt.UTC().Format(time.RFC3339), ForceNewClusterFreshFor)
	case in.MemberID == 0 || in.MemberID != req.MemberID:
		return disarm("it names member %x; this agent's member is %x", req.MemberID, in.MemberID)
	case in.ClusterID == 0:
		return disarm("the member's cluster is not known: no Lease to hold")
	case in.JournalOpen:
		return disarm("a recovery is open")
	case !in.MajorityLost:
		return disarm("the agent does not see the majority lost")
	case !in.Voter:
		return disarm("the agent's member list does not have it as a voter")
	}
	return ForceArmDecision{Action: ForceArmArm, Why: fmt.Sprintf("member %x's request of %s, the majority lost", req.MemberID, req.RequestedAt.UTC().Format(time.RFC3339))}
}
