package plan

// Tables for a StatefulSet member's move (move-to on the pod): one case per
// refusal, then each step as the state after the last one shows it.

import (
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/record"
)

// podMove is a move-away request to node9 with every fact good: node9 Ready,
// free PV pv-9, the store answering, the claim bound to the old PV here.
func podMove(mods ...func(*ClaimFacts)) opt {
	return func(s *spec) {
		c := &ClaimFacts{Node: "node1", Target: "node9", TargetFound: true, TargetReady: true, FreePV: "pv-9", ClaimBound: true, PodOnNode: true}
		for _, m := range mods {
			m(c)
		}
		s.in.Claim = c
		if s.in.Request == nil && !s.in.Journal.Active() {
			s.in.Request = &Request{Action: ActionMoveAway, Target: "node9"}
		}
		s.cfg.SnapshotStore = true
	}
}

func retained(c *ClaimFacts) { c.OldPVRetained = true }

// noKey: the move's snapshot is not in the store yet.
func noKey(r *record.Record) { r.StoreKey = "" }

func awayJournal(p record.Phase, mods ...func(*record.Record)) opt {
	return journalAt(p, append([]func(*record.Record){func(r *record.Record) {
		r.Request, r.MoveTarget, r.StoreKey = ActionMoveAway, "node9", "c/m/key"
	}}, mods...)...)
}

func TestMoveAwayRefusesEachUnsafeOrUnclearStart(t *testing.T) {
	cases := []struct {
		name string
		opts []opt
		want Reason
	}{
		{"not a pod member", []opt{local(localHealthy), func(s *spec) {
			s.in.Request, s.cfg.SnapshotStore = &Request{Action: ActionMoveAway, Target: "node9"}, true
		}}, ReasonBadRequest},
		{"API unreadable", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.Err = "timeout" })}, ReasonAPIUnavailable},
		{"target is this node", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.Target = "node1" }), func(s *spec) { s.in.Request.Target = "node1" }}, ReasonBadRequest},
		{"no target", []opt{local(localHealthy), podMove(), func(s *spec) { s.in.Request.Target = "" }}, ReasonBadRequest},
		{"no such node", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.TargetFound = false })}, ReasonBadRequest},
		{"target not Ready", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.TargetReady = false })}, ReasonTargetNotReady},
		{"target runs a member of the cluster", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.TargetHasMember = "ns/etcd-2" })}, ReasonTargetHasMember},
		{"template not gated", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.Ungated = "no gate" })}, ReasonNotGated},
		{"no store", []opt{local(localHealthy), podMove(), cfg(func(c *Config) { c.SnapshotStore = false })}, ReasonNoSnapshotStore},
		{"store unreachable", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.StoreError = "connection refused" })}, ReasonSnapshotStoreUnreached},
		{"no free PV", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.FreePV = "" })}, ReasonNoFreePV},
		{"the target's PVs are no place for the member (issue 38)", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.FreePV, c.PVUnusable = "", "PV p: no path" })}, ReasonTargetPVUnusable},
		{"local member not in the list", []opt{local(localGone), podMove()}, ReasonMemberNotHealthy},
		{"local data dir gone", []opt{local(localHealthy), dataDir("missing"), podMove()}, ReasonMemberNotHealthy},
		{"another learner", []opt{local(localHealthy), otherLearner(), podMove()}, ReasonLearnerPresent},
		{"majority lost", []opt{local(localHealthy), noLeader(), podMove()}, ReasonMajorityLost},
		{"dry run", []opt{local(localHealthy), podMove(), func(s *spec) { s.in.Request.DryRun = true }}, ReasonDryRun},
		{"no StatefulSet re-creates the pod", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.NotMovable = "no StatefulSet" })}, ReasonBadRequest},
		{"the pod would not be scheduled on the target", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.TargetUnschedulable = "taint x" })}, ReasonTargetNotReady},
		{"a member away (replicas > members)", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.Replicas = 4 })}, ReasonWouldLoseQuorum},
		// Issue 38: what the scheduler checks besides the node itself.
		{"no room on the target for the pod's requests", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.TargetShort = "cpu: requests 2, free 1" })}, ReasonTargetInsufficientResources},
		{"the target breaks the template's topology spread", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.TargetSpread = "zone: skew 2 > maxSkew 1" })}, ReasonTargetViolatesSpread},
		{"a host port of the pod is taken on the target", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.TargetPortsTaken = "2379/TCP on 0.0.0.0 by other/proxy" })}, ReasonTargetHostPortInUse},
		{"the pod's required anti-affinity names a pod on the target", []opt{local(localHealthy), podMove(func(c *ClaimFacts) { c.TargetPodAffinity = "anti-affinity: other/db on node9" })}, ReasonTargetViolatesPodAffinity},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(cluster(3, 3, c.opts...))
			if d.Action != Refuse || d.Reason != c.want {
				t.Fatalf("Decide = %s/%s (%s), want refuse/%s", d.Action, d.Reason, d.Detail, c.want)
			}
		})
	}
	// A voter down, or a cluster of two: removing the member first would
	// leave no fault tolerance (or no quorum).
	if d := Decide(cluster(3, 2, local(localHealthy), podMove())); d.Action != Refuse || d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("a voter down: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	if d := Decide(cluster(3, 2, local(localDown), verdict("down"), podMove())); d.Action != Refuse || d.Reason != ReasonMemberNotHealthy {
		t.Fatalf("local member down: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	if d := Decide(cluster(2, 2, local(localHealthy), podMove())); d.Action != Refuse || d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("two voters: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	d := Decide(cluster(3, 3, local(localHealthy), podMove(), func(s *spec) { s.in.Request.DryRun = true }))
	if !strings.Contains(d.Detail, "reserve PV pv-9 on node9") {
		t.Fatalf("dry run plan: %s", d.Detail)
	}
	// After the Lease, before the stop: checked again, closed on a change.
	d = Decide(cluster(3, 3, local(localHealthy), awayJournal(record.PhaseStarted), leaseHeld(), podMove(func(c *ClaimFacts) { c.TargetReady = false })))
	if d.Action != Finish || d.Reason != ReasonTargetNotReady {
		t.Fatalf("target gone NotReady after the Lease: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
}

func TestMoveAwayStepsFromTheStateAfterEach(t *testing.T) {
	steps := []struct {
		name string
		n, h int
		opts []opt
		want Action
	}{
		{"begin", 3, 3, []opt{local(localHealthy), podMove()}, Begin},
		{"retain the old PV first", 3, 3, []opt{local(localHealthy), awayJournal(record.PhaseStarted, noKey), leaseHeld(), podMove()}, StewardRetainPV},
		{"snapshot into the store while it serves", 3, 3, []opt{local(localHealthy), awayJournal(record.PhaseStarted, noKey), leaseHeld(), podMove(retained)}, TakeSnapshot},
		{"stop", 3, 3, []opt{local(localHealthy), awayJournal(record.PhaseStarted), leaseHeld(), podMove(retained)}, StopMember},
		{"remove", 3, 2, []opt{local(localDown), verdict("down"), awayJournal(record.PhaseStopped, oldID(id(1))), leaseHeld(), podMove(retained)}, RemoveMember},
		{"reserve the target's PV", 2, 2, []opt{local(localGone), awayJournal(record.PhaseRemoved, oldID(id(1))), leaseHeld(), podMove(retained)}, ReservePV},
		{"delete the claim", 2, 2, []opt{local(localGone), awayJournal(record.PhaseRemoved, oldID(id(1))), leaseHeld(),
			podMove(retained, func(c *ClaimFacts) { c.ReservedPV = "pv-9" })}, StewardDeletePVC},
		{"release the held pod", 2, 2, []opt{local(localGone), awayJournal(record.PhaseRemoved, oldID(id(1))), leaseHeld(),
			podMove(retained, func(c *ClaimFacts) { c.ReservedPV, c.ClaimDeleting = "pv-9", true })}, ReleasePod},
		// Released: done only once the member serves verified on the
		// target (TestAReleasedPodMoveSucceedsOnlyWhenItsMemberServesVerifiedOnTheTarget).
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			d := Decide(cluster(s.n, s.h, s.opts...))
			if d.Action != s.want || d.Reason != ReasonNone {
				t.Fatalf("Decide = %s/%s (%s), want %s", d.Action, d.Reason, d.Detail, s.want)
			}
		})
	}
	removedJ := awayJournal(record.PhaseRemoved, oldID(id(1)))
	ends := []struct {
		name   string
		facts  func(*ClaimFacts)
		action Action
		reason Reason
	}{
		// The free PV taken by another claim before the reservation: the
		// move ends; the member, removed and held here, is rejoined here.
		{"no free PV after the removal", func(c *ClaimFacts) { c.FreePV = "" }, Finish, ReasonNoFreePV},
		{"the target NotReady after the removal", func(c *ClaimFacts) { c.TargetReady = false }, Finish, ReasonTargetNotReady},
		{"the target tainted after the reservation", func(c *ClaimFacts) { c.ReservedPV, c.TargetUnschedulable = "pv-9", "taint x" }, UnreservePV, ReasonNone},
		{"no room on the target after the removal", func(c *ClaimFacts) { c.TargetShort = "cpu" }, Finish, ReasonTargetInsufficientResources},
		{"no room after the reservation", func(c *ClaimFacts) { c.ReservedPV, c.TargetShort = "pv-9", "cpu" }, UnreservePV, ReasonNone},
		{"the spread broken after the removal", func(c *ClaimFacts) { c.TargetSpread = "zone" }, Finish, ReasonTargetViolatesSpread},
		{"a host port taken after the removal", func(c *ClaimFacts) { c.TargetPortsTaken = "2380/TCP" }, Finish, ReasonTargetHostPortInUse},
		{"a host port taken after the reservation", func(c *ClaimFacts) { c.ReservedPV, c.TargetPortsTaken = "pv-9", "2380/TCP" }, UnreservePV, ReasonNone},
		{"the pod affinity broken after the removal", func(c *ClaimFacts) { c.TargetPodAffinity = "anti-affinity" }, Finish, ReasonTargetViolatesPodAffinity},
		{"the pod affinity broken after the reservation", func(c *ClaimFacts) { c.ReservedPV, c.TargetPodAffinity = "pv-9", "affinity" }, UnreservePV, ReasonNone},
		// Once the claim goes, only forward: the pod lands on the target.
		{"the target NotReady after the claim's deletion", func(c *ClaimFacts) { c.ReservedPV, c.ClaimDeleting, c.TargetReady = "pv-9", true, false }, ReleasePod, ReasonNone},
		{"the claim deleted by someone else", func(c *ClaimFacts) { c.ClaimBound, c.PodOnNode = false, false }, Finish, ReasonMoveFailed},
	}
	for _, e := range ends {
		d := Decide(cluster(2, 2, local(localGone), removedJ, leaseHeld(), podMove(retained, e.facts)))
		if d.Action != e.action || d.Reason != e.reason {
			t.Errorf("%s: %s/%s (%s), want %s/%s", e.name, d.Action, d.Reason, d.Detail, e.action, e.reason)
		}
	}
	// The objects unreadable after the removal: wait, nothing destructive.
	d := Decide(cluster(2, 2, local(localGone), awayJournal(record.PhaseRemoved, oldID(id(1))), leaseHeld(), podMove(func(c *ClaimFacts) { c.Err = "timeout" })))
	if d.Action != Nothing || d.Reason != ReasonAPIUnavailable {
		t.Fatalf("API away after the removal: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	// The majority lost after the stop: nothing, whatever the step.
	d = Decide(cluster(3, 1, local(localDown), verdict("down"), awayJournal(record.PhaseSnapshotted, oldID(id(1))), leaseHeld(), podMove()))
	if d.Action != Nothing || d.Reason != ReasonMajorityLost {
		t.Fatalf("majority lost mid-move: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	// Done, or failed once its claim was released: the member is not
	// healed here unasked (its future is on the target). Failed before
	// that: it is (removed, its claim still here).
	done := func(result string, released bool) opt {
		return awayJournal(record.PhaseDone, oldID(id(1)), func(r *record.Record) {
			r.Result = result
			if released {
				r.ClaimReleasedAt = t0
			}
		})
	}
	for _, c := range []struct {
		result   string
		released bool
		moved    bool
	}{{record.ResultSucceeded, true, true}, {record.ResultFailed, true, true}, {record.ResultFailed, false, false}} {
		d = Decide(cluster(2, 2, local(localGone), done(c.result, c.released)))
		if (d.Reason == ReasonMovedAway) != c.moved || (c.moved && d.Action != Nothing) {
			t.Errorf("after a move %s (claim released %v): %s/%s (%s)", c.result, c.released, d.Action, d.Reason, d.Detail)
		}
	}
}

// From the second review: the target is judged again right before the
// removal (the member, stopped but not removed, is put back), and a move
// asked while an automatic recovery is open does not stand in for that
// recovery's request (rule 6 re-checks it).
func TestMoveAwayJudgesTheTargetAgainBeforeTheRemoval(t *testing.T) {
	stopped := awayJournal(record.PhaseStopped, oldID(id(1)))
	for _, c := range []struct {
		name   string
		facts  func(*ClaimFacts)
		action Action
		reason Reason
	}{
		{"the target NotReady", func(c *ClaimFacts) { c.TargetReady = false }, Finish, ReasonTargetNotReady},
		{"the target tainted", func(c *ClaimFacts) { c.TargetUnschedulable = "taint x" }, Finish, ReasonTargetNotReady},
		{"a member of the cluster on the target", func(c *ClaimFacts) { c.TargetHasMember = "ns/etcd-0" }, Finish, ReasonTargetHasMember},
		{"the free PV gone", func(c *ClaimFacts) { c.FreePV = "" }, Finish, ReasonNoFreePV},
		{"no room for the pod any more", func(c *ClaimFacts) { c.TargetShort = "memory" }, Finish, ReasonTargetInsufficientResources},
		{"the spread broken now", func(c *ClaimFacts) { c.TargetSpread = "zone" }, Finish, ReasonTargetViolatesSpread},
		{"a host port taken now", func(c *ClaimFacts) { c.TargetPortsTaken = "2379/TCP" }, Finish, ReasonTargetHostPortInUse},
		{"the pod affinity broken now", func(c *ClaimFacts) { c.TargetPodAffinity = "symmetry" }, Finish, ReasonTargetViolatesPodAffinity},
		{"the objects unreadable", func(c *ClaimFacts) { c.Err = "timeout" }, Nothing, ReasonAPIUnavailable},
		{"all good", func(*ClaimFacts) {}, RemoveMember, ReasonNone},
	} {
		d := Decide(cluster(3, 2, local(localDown), verdict("down"), stopped, leaseHeld(), podMove(retained, c.facts)))
		if d.Action != c.action || d.Reason != c.reason {
			t.Errorf("%s: %s/%s (%s), want %s/%s", c.name, d.Action, d.Reason, d.Detail, c.action, c.reason)
		}
	}
	// An automatic recovery open, its member healthy again, a move asked
	// meanwhile: the recovery closes as not needed; nothing is stopped.
	auto := journalAt(record.PhaseStarted, func(r *record.Record) { r.Request = "auto" })
	d := Decide(cluster(3, 3, local(localHealthy), auto, leaseHeld(), func(s *spec) {
		s.in.Request = &Request{Action: ActionMoveAway, Target: "node9"}
	}))
	if d.Action != Finish || d.Reason != ReasonNotNeeded {
		t.Fatalf("a move asked during an automatic recovery: %s/%s (%s), want finish/not-needed", d.Action, d.Reason, d.Detail)
	}
}

// A failed pod move is settled on the API's facts: released (never healed
// at the source; a held pod still here is left to a person), or not (its
// reservation taken back).
func TestAFailedPodMoveIsSettledOnTheFacts(t *testing.T) {
	for _, c := range []struct {
		name string
		f    ClaimFacts
		want Settle
	}{
		{"claim bound, PV reserved", ClaimFacts{ClaimBound: true, ReservedPV: "pv-9", PodOnNode: true}, Settle{Unreserve: true}},
		{"claim bound, nothing reserved", ClaimFacts{ClaimBound: true, PodOnNode: true}, Settle{}},
		{"claim deleting, held pod here", ClaimFacts{ClaimBound: true, ClaimDeleting: true, ReservedPV: "pv-9", PodOnNode: true, Node: "node1", Target: "node9"}, Settle{Released: true}},
		{"claim gone, pod gone", ClaimFacts{ReservedPV: "pv-9"}, Settle{Released: true}},
	} {
		got := SettleMoveAway(c.f)
		if got.Released != c.want.Released || got.Unreserve != c.want.Unreserve || (got.Leftover != "") != (c.f.PodOnNode && c.want.Released) {
			t.Errorf("%s: %+v, want released %v unreserve %v", c.name, got, c.want.Released, c.want.Unreserve)
		}
	}
}
