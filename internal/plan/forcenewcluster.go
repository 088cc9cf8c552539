package plan

import (
	"fmt"
	"time"
)

// GateForceNewCluster: the gate starts etcd once with --force-new-cluster,
// on a person's request (the majority-lost restore of a StatefulSet
// member from its survivor, docs/management-nodes.md "Majority lost").
const GateForceNewCluster Reason = "force-new-cluster"

// ForceNewClusterFreshFor bounds how long a person's request waits for the
// member's next start: a request forgotten in the state dir must never
// turn a later restart into a one-member cluster (dropping every member
// added since).
const ForceNewClusterFreshFor = 15 * time.Minute

// ForceNewClusterRequest is what a person wrote in the member's state dir
// (memberruntime.ForceFile): the member ID to force, as its survivor.
type ForceNewClusterRequest struct {
	MemberID    uint64
	RequestedAt time.Time
}

// Is: the same request (its time compared as an instant: two reads of one
// file with a non-UTC offset differ in their time.Location).
func (r ForceNewClusterRequest) Is(o ForceNewClusterRequest) bool {
	return r.MemberID == o.MemberID && r.RequestedAt.Equal(o.RequestedAt)
}

// AgentWord is the node's agent's latest report on the member (its status
// file), which it judged over full probes of every member: the gate's own
// look is one observation; the agent's is its verdict over polls.
type AgentWord struct {
	At           time.Time
	MajorityLost bool
	// Voter: the member is a voter in the agent's member list (a learner
	// forced would drop every voter).
	Voter bool
	// Err says why the report could not be read ("" read).
	Err string
	// Armed is the agent's mark that it holds the cluster's Lease for a
	// request (nil: none, or unreadable).
	Armed *ForceArm
	// UnarmedSince is when the gate first found this request without a
	// valid mark (zero: not before this look).
	UnarmedSince time.Time
}

// GateAwaitingArm: the gate holds etcd while a person's --force-new-cluster
// request waits for the node's agent to arm it (at most ForceArmWaitFor,
// then the request is refused and etcd starts as judged).
const GateAwaitingArm Reason = "awaiting-arm"

// ForceArmWaitFor bounds that wait.
const ForceArmWaitFor = time.Minute

// WaitsForArm: the gate holds etcd for a request's arm.
func (v GateVerdict) WaitsForArm() bool { return !v.Pass && v.Reason == GateAwaitingArm }

// AgentWordFreshFor bounds the age of the agent's word the gate takes (the
// agent renews its status file while the majority is lost).
const AgentWordFreshFor = 2 * time.Minute

// DecideForceNewCluster upgrades the gate's pass on the member's own data
// (v, judged on in with the cluster asked) to a start with
// --force-new-cluster, or says why not (the request is then set aside:
// never used later). The request is a person's; this is the machine's
// fence around it (docs/design.md §4, rule 1: the agents never act without
// quorum, and a person's restore must not split a cluster that has one):
// the data dir is this member's, pinned, of the member named; no recovery
// is open; the request is fresh; the node's agent said, within
// AgentWordFreshFor, that the majority is lost and the member is a voter;
// the agent armed this request, holding the cluster's recovery Lease
// (DecideForceArm: no other member's request can be armed meanwhile);
// and the cluster, asked now, has no quorum and no other cluster answers.
// A gate cut off from a quorum that exists would still see none: that is
// what the person's checks and status --cluster (every member's agent)
// are for.
func DecideForceNewCluster(in GateInput, v GateVerdict, req ForceNewClusterRequest, agent AgentWord, asked bool) (GateVerdict, error) {
	refuse := func(format string, a ...any) (GateVerdict, error) {
		return v, fmt.Errorf("the --force-new-cluster request for member %x is not used: "+format, append([]any{req.MemberID}, a...)...)
	}
	switch age := in.Now.Sub(req.RequestedAt); {
	case !v.Pass || v.Reason != GateDataDirOK:
		return refuse("etcd would not start on its own data (%s: %s)", v.Reason, v.Detail)
	case req.MemberID == 0:
		return refuse("it names no member ID")
	case !in.Pin.Seen() || uint64(in.Pin.MemberID) != req.MemberID:
		return refuse("this member served as %s, not as the member named", in.Pin)
	case in.DataDirMemberID != req.MemberID:
		return refuse("the data dir is member %x's", in.DataDirMemberID)
	case in.Journal.Active():
		return refuse("a recovery is open (phase %s)", in.Journal.Phase)
	case age > ForceNewClusterFreshFor || age < -time.Minute:
		return refuse("it was written at %s, %s before this start (at most %s)", req.RequestedAt.UTC().Format(time.RFC3339),
			age.Round(time.Second), ForceNewClusterFreshFor)
	case agent.Err != "":
		return refuse("the agent's report on it cannot be read (%s)", agent.Err)
	case in.Now.Sub(agent.At) > AgentWordFreshFor || agent.At.Sub(in.Now) > time.Minute:
		return refuse("the agent's latest report is of %s (at most %s old): is the node's agent running?", agent.At.UTC().Format(time.RFC3339), AgentWordFreshFor)
	case !agent.MajorityLost:
		return refuse("the agent's latest report (%s) does not say the majority is lost", agent.At.UTC().Format(time.RFC3339))
	case !agent.Voter:
		return refuse("the agent's member list does not have it as a voter")
	case !asked:
		return refuse("the cluster was not asked")
	case len(in.Obs.ForeignEndpoints) > 0:
		return refuse("%v answer for another cluster: which cluster the endpoints reach is not clear", in.Obs.ForeignEndpoints)
	case !quorumLost(in.Obs):
		return refuse("the cluster has a quorum (leader %x, %d of %d voters serving): forcing this member would split it",
			in.Obs.LeaderID, in.Obs.ServingVoters(), in.Obs.Voters())
	case agent.Armed == nil || !agent.Armed.Arms(req, in.Now):
		why := "the node's agent has not armed it under the cluster's recovery Lease (one request per cluster at a time; its reason is in force-new-cluster.not-armed)"
		if a := agent.Armed; a != nil {
			why = fmt.Sprintf("the agent's mark is for member %x's request of %s, valid until %s", a.MemberID,
				a.RequestedAt.UTC().Format(time.RFC3339), a.Until.UTC().Format(time.RFC3339))
		}
		// Judged last: a request that cannot be used (a quorum seen) is
		// refused at once. A poll late, a restarted agent, an API blip:
		// the start waits for the mark a while before the request is
		// used up.
		if agent.UnarmedSince.IsZero() || in.Now.Sub(agent.UnarmedSince) < ForceArmWaitFor {
			return hold(GateAwaitingArm, fmt.Sprintf("the --force-new-cluster request of %s waits (at most %s) for the node's agent to arm it: %s",
				req.RequestedAt.UTC().Format(time.RFC3339), ForceArmWaitFor, why)), nil
		}
		return refuse("%s, for %s", why, ForceArmWaitFor)
	}
	why := fmt.Sprintf("%d of %d voters serving, leader %x", in.Obs.ServingVoters(), in.Obs.Voters(), in.Obs.LeaderID)
	if in.Obs.MemberListError != "" {
		why = "the cluster cannot be asked: " + in.Obs.MemberListError
	}
	v = pass(GateForceNewCluster, fmt.Sprintf("a person asked at %s for member %x to start once with --force-new-cluster, and the cluster has no quorum (%s)",
		req.RequestedAt.UTC().Format(time.RFC3339), req.MemberID, why))
	v.Until, v.Request = agent.Armed.Until, req
	return v, nil
}

// ForcesNewCluster: etcd starts once with --force-new-cluster.
func (v GateVerdict) ForcesNewCluster() bool { return v.Pass && v.Reason == GateForceNewCluster }
