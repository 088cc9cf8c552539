package plan

import (
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// A StatefulSet member's move (UC3 on management nodes; etcd-agent.io/move-to
// on the member pod): one identity, one pod, so it cannot be added first.
// The source's agent, under the Lease, one step at a time:
//
//  1. keeps the old PV (reclaim policy Retain), streams a snapshot from a
//     follower and puts it in the snapshot store, while the member serves
//     (a store that refuses ends the move before anything stopped);
//  2. stops the member (its pod deleted, the one that comes back held by
//     the start gate); its data dir stays in place on the old PV, so a
//     move that fails before the removal puts the member back on it;
//  3. removes the member (rule 2: the healthy voters left are a quorum);
//  4. reserves a free PV on the target node for the member's claim
//     (pre-bound by name, annotated with the stored snapshot), deletes the
//     claim, and deletes the held pod.
//
// The StatefulSet re-creates the claim, which binds the reserved PV, and the
// pod, which the scheduler puts where that PV is; the target's agent adds
// the member as a learner seeded from the stored snapshot, and promotes it.
// Each step after the stop is judged from the actual state (member list,
// PVs, claim, pod), so a resumed move never repeats one.

// ActionMoveAway is a pod member's move request (move-to on the pod).
const ActionMoveAway = "move-away"

// Pod move steps besides stop, snapshot and remove.
const (
	// ReservePV pre-binds the target's free PV to the member's claim name;
	// UnreservePV takes this move's reservation back (the move ends before
	// the claim is released).
	ReservePV   Action = "reserve-pv"
	UnreservePV Action = "unreserve-pv"
	// ReleasePod deletes the member's held pod: its StatefulSet re-creates
	// it on the reserved PV.
	ReleasePod Action = "release-pod"
)

// ReasonNoFreePV: the target node has no free PV the member's claim binds.
const ReasonNoFreePV Reason = "no-free-pv"

// ReasonTargetPVUnusable: the target's PVs the claim would bind are no
// place for the member (affinity against the Node's labels, no path).
const ReasonTargetPVUnusable Reason = "target-pv-unusable"

// ReasonTargetInsufficientResources: the target node's allocatable, less
// what the pods bound to it request, does not cover the member pod's
// requests (the scheduler's resource fit).
const ReasonTargetInsufficientResources Reason = "target-insufficient-resources"

// ReasonTargetViolatesSpread: the member pod on the target would break a
// DoNotSchedule topology spread constraint of its StatefulSet's template.
const ReasonTargetViolatesSpread Reason = "target-violates-topology-spread"

// ReasonTargetHostPortInUse: a host port the member pod asks for (every
// container port of a hostNetwork pod is one) is taken on the target by a
// pod bound there, for the same protocol and an overlapping IP (the
// scheduler's NodePorts filter).
const ReasonTargetHostPortInUse Reason = "target-host-port-in-use"

// ReasonTargetViolatesPodAffinity: the member pod on the target would break
// a required inter-pod affinity or anti-affinity, its own or (anti-affinity)
// that of a pod already in the target's topology domain (the scheduler's
// InterPodAffinity filter).
const ReasonTargetViolatesPodAffinity Reason = "target-violates-pod-affinity"

// ReasonAwaitingMoveTarget: a released pod move waits, without the Lease
// (the target's agent takes it to add the learner), for its member to
// serve on the target and that agent's verified answer; not a refusal.
const ReasonAwaitingMoveTarget Reason = "awaiting-move-target"

// ClaimFacts is what the API shows of a pod member's move: the target node,
// the member's claim and PVs, its pod. Filled by the agent for a move-away.
type ClaimFacts struct {
	// Err: the API could not be read now ("" = every fact below is read).
	Err string
	// Node is this agent's node; Target the move's; ClusterID the
	// member's cluster (named on the reserved PV).
	Node, Target string
	ClusterID    uint64
	// ClaimUID and PV are the member's claim and PV the facts are about:
	// the journal's once the move began (recorded at its start), the pod's
	// before.
	ClaimUID, PV string
	// NotMovable says why the pod cannot move this way ("" = it can): no
	// StatefulSet re-creates it, or its claim is not one of the
	// StatefulSet's claim templates.
	NotMovable string
	// Replicas is the StatefulSet's replica count (0: unknown).
	Replicas    int
	TargetFound bool
	TargetReady bool
	// TargetUnschedulable says why the StatefulSet's pod would not be
	// scheduled on the target ("" = it would: not cordoned, every taint
	// tolerated, its node selector and required affinity met).
	TargetUnschedulable string
	// TargetHasMember names a pod of the member's cluster bound to the
	// target ("" none): the StatefulSet's anti-affinity keeps one per node.
	TargetHasMember string
	// Ungated says why the member's StatefulSet might re-create its pod
	// without the start gate ("" = gated).
	Ungated string
	// StoreError: the snapshot store did not answer a bounded list ("" =
	// it did, or not asked).
	StoreError string
	// FreePV is a PV on the target the claim can bind (Available, no
	// claimRef, its class, size and access modes); ReservedPV the one this
	// move reserved ("" none).
	FreePV     string
	ReservedPV string
	// PVUnusable says why the PVs on the target the claim would bind are
	// no place for the member ("" none was turned away): their node
	// affinity does not match the target Node's labels, or their spec
	// names no path the target's agent finds.
	PVUnusable string
	// The member's claim as the move found it: still there (ClaimBound:
	// bound to the old PV on this node), being deleted; the old PV kept.
	ClaimBound    bool
	ClaimDeleting bool
	OldPVRetained bool
	// PodOnNode: the member's pod on its old claim (the held one) is bound
	// to this node.
	PodOnNode bool
	// TargetShort says which of the member pod's requests the target's
	// free allocatable does not cover ("" = it fits; the scheduler's
	// resource fit, pods bound there counted).
	TargetShort string
	// TargetSpread says which DoNotSchedule topology spread constraint of
	// the template the pod on the target would break ("" = none).
	TargetSpread string
	// TargetPortsTaken says which of the member pod's host ports (on a
	// hostNetwork pod, every container port) a pod bound to the target
	// already uses, for the same protocol and an overlapping IP ("" = none).
	TargetPortsTaken string
	// TargetPodAffinity says which required inter-pod affinity or
	// anti-affinity the member pod on the target would break ("" = none):
	// a term of its own affinity that no pod in the target's topology
	// domain meets, a pod there its anti-affinity names, or a pod there
	// whose anti-affinity names the member pod.
	TargetPodAffinity string
	// PodNode is the node the member's pod (of its name) is bound to now
	// ("" not bound, or no pod).
	PodNode string
	// TargetAnswer is the target agent's last-recovery on the member's
	// pod there, when it answers this move (its moveFrom names this
	// node's pod); nil: none yet.
	TargetAnswer *MoveAnswer
}

// checkMoveAway: a pod member's move may begin (and, before its stop, go
// on) only to a Ready node with a free PV and no member of the cluster, one
// the scheduler would put the member's pod on (room for it, its host ports
// free, its topology spread and required pod affinity kept), with the store
// answering, the template gated, and every voter of a cluster of three or
// more healthy: the member is removed before its pod moves.
func checkMoveAway(in Input, cfg Config) (Decision, bool) {
	o, r, c := in.Obs, in.Request, in.Claim
	switch {
	case c == nil:
		return refuse(ReasonBadRequest, "move-to on a pod is served by an agent with --member-source=pods"), false
	case c.Err != "":
		return refuse(ReasonAPIUnavailable, "the move's objects cannot be read: "+c.Err), false
	case c.NotMovable != "":
		return refuse(ReasonBadRequest, c.NotMovable), false
	case r.Target == "" || r.Target == c.Node:
		return refuse(ReasonBadRequest, fmt.Sprintf("move target %q: name another node than this one (%s)", r.Target, c.Node)), false
	case !c.TargetFound:
		return refuse(ReasonBadRequest, fmt.Sprintf("no node %q", r.Target)), false
	case !c.TargetReady:
		return refuse(ReasonTargetNotReady, fmt.Sprintf("node %s is not Ready", r.Target)), false
	case c.TargetUnschedulable != "":
		return refuse(ReasonTargetNotReady, fmt.Sprintf("the member's pod would not be scheduled on %s: %s", r.Target, c.TargetUnschedulable)), false
	case c.TargetHasMember != "":
		return refuse(ReasonTargetHasMember, fmt.Sprintf("node %s already runs %s of this cluster", r.Target, c.TargetHasMember)), false
	case c.TargetShort != "":
		return refuse(ReasonTargetInsufficientResources, fmt.Sprintf("node %s has no room for the member's pod: %s", r.Target, c.TargetShort)), false
	case c.TargetSpread != "":
		return refuse(ReasonTargetViolatesSpread, fmt.Sprintf("the member's pod on %s would break its StatefulSet's topology spread: %s", r.Target, c.TargetSpread)), false
	case c.TargetPortsTaken != "":
		return refuse(ReasonTargetHostPortInUse, fmt.Sprintf("the member's pod on %s needs host ports taken there: %s", r.Target, c.TargetPortsTaken)), false
	case c.TargetPodAffinity != "":
		return refuse(ReasonTargetViolatesPodAffinity, fmt.Sprintf("the member's pod on %s would break a required pod affinity: %s", r.Target, c.TargetPodAffinity)), false
	case c.Ungated != "":
		return refuse(ReasonNotGated, "the pod might come back without the start gate holding etcd: "+c.Ungated), false
	case !cfg.SnapshotStore:
		return refuse(ReasonNoSnapshotStore, "a move needs --snapshot-store: the member's snapshot goes there before it is removed"), false
	case c.StoreError != "":
		return refuse(ReasonSnapshotStoreUnreached, "the snapshot store did not answer: "+c.StoreError), false
	case c.FreePV == "" && c.PVUnusable != "":
		return refuse(ReasonTargetPVUnusable, fmt.Sprintf("node %s has no PV the member can use: %s", r.Target, c.PVUnusable)), false
	case c.FreePV == "":
		return refuse(ReasonNoFreePV, fmt.Sprintf("node %s has no free PV the member's claim can bind (Available, unclaimed, its class, size and access modes)", r.Target)), false
	}
	local, inList := localMember(o)
	n, h := o.Voters(), o.HealthyVoters()
	switch {
	case quorumLost(o) || o.MemberListError != "":
		return refuse(ReasonMajorityLost, fmt.Sprintf("%d of %d voters serve: no move", o.ServingVoters(), n)), false
	case !inList || local.IsLearner || !local.Serving || !observation.DataDirUsable(o.Local.DataDirClass):
		return refuse(ReasonMemberNotHealthy, "the local member is not a healthy voter: a move takes a healthy member; heal it instead"), false
	case h < n:
		return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("%d healthy of %d voters: a move begins only when every voter is healthy", h, n)), false
	case n < 3:
		return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("%d voters: a pod's member is stopped and removed before it moves, which needs a cluster of three or more", n)), false
	case c.Replicas > len(o.Members):
		return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("the StatefulSet has %d replicas and the cluster %d members: a member is away (a move or a heal under way); one at a time", c.Replicas, len(o.Members))), false
	}
	return Decision{}, true
}

// decideMoveAwayStart: before the stop, the old PV is kept and the move's
// snapshot put in the store while the member still serves.
func decideMoveAwayStart(in Input) (Decision, bool) {
	o, j, c := in.Obs, in.Journal, in.Claim
	if !c.OldPVRetained {
		return Decision{Action: StewardRetainPV, Detail: "keep the old data on " + c.Node + " whatever happens to its claim"}, true
	}
	if j.StoreKey == "" {
		src, why, err := PickSource(o, uint64(j.OldMemberID))
		if err != nil {
			return wait(ReasonNoSnapshotSource, err.Error()), true
		}
		return Decision{Action: TakeSnapshot, SourceID: src.ID, Detail: "stream the move's snapshot from " + why + " into the snapshot store"}, true
	}
	return Decision{}, false
}

// MovedAwayFrom: a pod move's journal whose claim was released to the
// target (or a move that succeeded): the member's future is on the target,
// never healed here unasked.
// MovedAway says whether j is the tombstone of a member moved to another
// node: it is never healed, nor its manifest put back, here unasked.
func MovedAway(j record.Record) bool { return movedAway(j) }

func movedAway(j record.Record) bool {
	switch j.Request {
	case ActionMoveOut:
		return j.Result == record.ResultSucceeded
	case ActionMoveAway:
		return j.Result == record.ResultSucceeded || (!j.Active() && !j.ClaimReleasedAt.IsZero())
	}
	return false
}

// movePlanText is a pod move's dry-run plan.
func movePlanText(o observation.Observation, c *ClaimFacts, target string) string {
	local, _ := localMember(o)
	n := o.Voters()
	return fmt.Sprintf("stop member %x, stream a snapshot from a follower into the snapshot store, remove %x (%d voters, quorum %d), keep its PV, reserve PV %s on %s for its claim, delete the claim and the held pod; the StatefulSet re-creates it on %s, whose agent adds it as a learner seeded from the store and promotes it (%d voters)",
		local.ID, local.ID, n-1, memberstate.Quorum(n-1), c.FreePV, target, target, n)
}

// decideMoveAway: the member is stopped (and its data dir quarantined):
// snapshot into the store, remove, then free the claim for the target.
func decideMoveAway(in Input, cfg Config) Decision {
	o, j, c := in.Obs, in.Journal, in.Claim
	if foreignOnly(o) || quorumLost(o) || o.MemberListError != "" {
		return wait(ReasonMajorityLost, "no fresh member list with a quorum: the move waits, nothing destructive")
	}
	if j.StoreKey == "" {
		// Before the stop, normally; a move begun by an older agent
		// snapshots after it.
		src, why, err := PickSource(o, uint64(j.OldMemberID))
		if err != nil {
			return wait(ReasonNoSnapshotSource, err.Error())
		}
		return Decision{Action: TakeSnapshot, SourceID: src.ID, Detail: "stream the move's snapshot from " + why + " into the snapshot store"}
	}
	if old, ok := o.Member(uint64(j.OldMemberID)); ok && j.OldMemberID != 0 {
		// The target is judged again before the removal: a move that can
		// no longer go there ends now, and the member is put back.
		if c == nil || c.Err != "" {
			return wait(ReasonAPIUnavailable, "the move's objects must be read again before the removal")
		}
		if r, why := targetNoLonger(c, j.MoveTarget); r != ReasonNone {
			return Decision{Action: Finish, Reason: r, Detail: why + ": the member is put back"}
		}
		if c.FreePV == "" && c.ReservedPV == "" {
			return Decision{Action: Finish, Reason: ReasonNoFreePV, Detail: fmt.Sprintf("node %s has no free PV for the claim now: the member is put back", j.MoveTarget)}
		}
		return decideRemove(o, old)
	}
	if c == nil || c.Err != "" {
		detail := "the pod move's objects are not known"
		if c != nil {
			detail = c.Err
		}
		return wait(ReasonAPIUnavailable, "member removed; its claim is freed once the API answers: "+detail)
	}
	released := !c.ClaimBound || c.ClaimDeleting // the claim goes: forward only
	lost, why := targetNoLonger(c, j.MoveTarget)
	targetOK := lost == ReasonNone
	switch {
	case !c.OldPVRetained && !released:
		return Decision{Action: StewardRetainPV, Detail: "keep the old data on " + c.Node + " whatever happens to its claim"}
	case !released && !targetOK:
		// Removed, held here, its claim where it was: the move ends (its
		// reservation taken back first) and the member is rejoined on
		// this node as after any removal.
		if c.ReservedPV != "" {
			return Decision{Action: UnreservePV, Detail: fmt.Sprintf("%s: take back the reservation of PV %s", why, c.ReservedPV)}
		}
		return Decision{Action: Finish, Reason: lost, Detail: fmt.Sprintf("%s: member %x stays here, removed, and is rejoined here", why, uint64(j.OldMemberID))}
	case c.ReservedPV == "" && !released && c.FreePV != "":
		return Decision{Action: ReservePV, Detail: fmt.Sprintf("reserve PV %s on %s for the member's claim, with the stored snapshot %s", c.FreePV, j.MoveTarget, j.StoreKey)}
	case c.ReservedPV == "" && !released:
		return Decision{Action: Finish, Reason: ReasonNoFreePV, Detail: fmt.Sprintf("no PV on %s could be reserved for the claim: member %x stays here, removed, and is rejoined here",
			j.MoveTarget, uint64(j.OldMemberID))}
	case c.ReservedPV == "":
		// Someone else deleted the claim: its successor binds wherever
		// the scheduler finds a PV, and the member rejoins there.
		return Decision{Action: Finish, Reason: ReasonMoveFailed, Detail: fmt.Sprintf("the member's claim went before a PV on %s was reserved for it: the member rejoins where its new claim binds", j.MoveTarget)}
	case !released:
		// The claim before the pod: the claim stays (protected) while the
		// held pod exists and goes with it; the other order re-creates the
		// pod on the old claim.
		return Decision{Action: StewardDeletePVC, Detail: "the claim binds the member to its PV on " + c.Node}
	case c.PodOnNode:
		return Decision{Action: ReleasePod, Detail: fmt.Sprintf("delete the held pod: its StatefulSet re-creates it on PV %s of %s", c.ReservedPV, j.MoveTarget)}
	}
	// Released: the rest is the target's (podmove_wait.go).
	return awaitMoveTarget(in, cfg)
}

// targetNoLonger says why the move's target can no longer take the member
// (judged again before the removal, and after it until the claim is
// released), as the scheduler would judge it; ReasonNone: it still can.
func targetNoLonger(c *ClaimFacts, target string) (Reason, string) {
	switch {
	case !c.TargetFound || !c.TargetReady || c.TargetUnschedulable != "":
		return ReasonTargetNotReady, fmt.Sprintf("node %s can no longer take the member (Ready %v, %s)", target, c.TargetReady, c.TargetUnschedulable)
	case c.TargetHasMember != "":
		return ReasonTargetHasMember, fmt.Sprintf("node %s runs %s of this cluster now", target, c.TargetHasMember)
	case c.TargetShort != "":
		return ReasonTargetInsufficientResources, fmt.Sprintf("node %s has no room for the member's pod now: %s", target, c.TargetShort)
	case c.TargetSpread != "":
		return ReasonTargetViolatesSpread, fmt.Sprintf("the member's pod on %s would break its StatefulSet's topology spread now: %s", target, c.TargetSpread)
	case c.TargetPortsTaken != "":
		return ReasonTargetHostPortInUse, fmt.Sprintf("the member's pod on %s needs host ports taken there now: %s", target, c.TargetPortsTaken)
	case c.TargetPodAffinity != "":
		return ReasonTargetViolatesPodAffinity, fmt.Sprintf("the member's pod on %s would break a required pod affinity now: %s", target, c.TargetPodAffinity)
	}
	return ReasonNone, ""
}

// Settle is what a failed pod move leaves (SettleMoveAway): whether its
// claim was released (the member's future is on the target), whether this
// move's reservation is to be taken back, and what is left to a person.
type Settle struct {
	Released  bool
	Unreserve bool
	Leftover  string
}

// SettleMoveAway decides, on the API's facts, how a failed pod move closes:
// released once its claim is deleting or gone (then only a held pod still
// here is left, to a person: the move no longer acts); otherwise its
// reservation, if any, is taken back, so that no later claim of that name
// lands on the target's PV.
func SettleMoveAway(c ClaimFacts) Settle {
	if released := !c.ClaimBound || c.ClaimDeleting; released {
		s := Settle{Released: true}
		if c.PodOnNode {
			s.Leftover = "the member's claim is released but its held pod is still on " + c.Node + ": delete it (kubectl delete pod) and the StatefulSet re-creates it on " + c.Target
		}
		return s
	}
	return Settle{Unreserve: c.ReservedPV != ""}
}
