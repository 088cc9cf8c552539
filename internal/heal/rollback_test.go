package heal

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const strandedID = 0xb9

// withStranded adds the learner a dead owner left (unstarted: no name, not
// serving) and the watchdog's clock on it: no progress for idle.
func withStranded(res memberstate.Result, idle time.Duration) memberstate.Result {
	o := res.Observation
	o.Members = append(slices.Clone(o.Members), observation.Member{ID: strandedID, PeerURLs: []string{peerURL(9)}, IsLearner: true})
	res.Observation = o
	res.Learners = []memberstate.LearnerProgress{{ID: strandedID, Since: o.At.Add(-idle)}}
	return res
}

// Issue 10 item 5: a learner whose owner died (its Lease expired: free
// here) and that made no progress for the stall timeout is rolled back by
// the next Lease holder: journaled, fenced, an Event; then our heal may
// begin. Before: refused learner-present, forever.
func TestStrandedLearnerIsRolledBackThenTheHealMayBegin(t *testing.T) {
	lost := cluster3(memberstate.Lost, 2, 3)
	stranded := withStranded(lost, 10*time.Minute) // stall timeout 5m
	r := newRig(t, stranded, lost)                 // after the remove, the learner is gone
	// Our heal is considered again at once, on a fresh observation (the
	// third): by then another agent has taken the Lease, so it is refused
	// (else it would begin; see Plan below).
	r.obs.onObserve = func(n int) {
		if n == 3 {
			r.lease.other = "node9/m9"
		}
	}
	// A first look finds the Lease free: not yet for the stall timeout.
	if out := r.h.Consider(context.Background(), stranded, nil); len(r.cluster.removed) != 0 || out.Decision.Reason != plan.ReasonLearnerPresent {
		t.Fatalf("the Lease seen free only now: %s/%q, removed %x; want learner-present, nothing removed",
			out.Decision.Action, out.Decision.Reason, r.cluster.removed)
	}
	r.h.leaseFreeSince = stranded.Observation.At.Add(-6 * time.Minute) // free at every look for 6 minutes
	out := r.h.Consider(context.Background(), stranded, nil)
	if !slices.Equal(r.cluster.removed, []uint64{strandedID}) {
		t.Fatalf("Consider: %s/%q (%s); removed %x, want the stranded learner %x removed", out.Decision.Action, out.Decision.Reason,
			out.Decision.Detail, r.cluster.removed, strandedID)
	}
	j := r.journal(t)
	if j.Kind != journal.KindRollbackLearner || uint64(j.LearnerID) != strandedID || j.Active() ||
		j.Result != journal.ResultSucceeded || j.Reason != string(plan.ReasonLearnerRolledBack) || j.PhaseTimes[journal.PhaseRemoved].IsZero() {
		t.Fatalf("journal %+v: want a closed rollback record of %x, removed, succeeded, learner-rolled-back", j, strandedID)
	}
	if n := r.rep.count(nodereport.ReasonLearnerRolledBack); n != 1 {
		t.Fatalf("%d %s Events, want 1 (events %v)", n, nodereport.ReasonLearnerRolledBack, r.rep.events)
	}
	if v := testutil.ToFloat64(r.m.LearnerRollbacksTotal.WithLabelValues("m1")); v != 1 {
		t.Fatalf("learner_rollbacks_total = %v, want 1", v)
	}
	if r.rt.stops != 0 || r.lease.renewing || r.lease.acquires != 1 {
		t.Fatalf("rollback: %d stops of the local member, Lease renewing %v after %d acquires", r.rt.stops, r.lease.renewing, r.lease.acquires)
	}
	if out.Decision.Reason != plan.ReasonLeaseHeldByOther || r.obs.n != 3 {
		t.Fatalf("after the rollback: %s/%q (%s) after %d observations; want our heal considered at once on a fresh one",
			out.Decision.Action, out.Decision.Reason, out.Decision.Detail, r.obs.n)
	}
	r.lease.other = ""
	if d := r.h.Plan(context.Background(), lost, nil); d.Action != plan.Begin {
		t.Fatalf("after the rollback: %s/%q (%s), want our heal to begin", d.Action, d.Reason, d.Detail)
	}
}

// Never while another agent holds a live Lease (the owner may be mid-heal),
// nor a learner that progresses (a slow catch-up by a live owner).
func TestStrandedLearnerKeptWhileLeaseLiveOrProgressing(t *testing.T) {
	lost := cluster3(memberstate.Lost, 2, 3)
	for name, tc := range map[string]struct {
		res   memberstate.Result
		other string
	}{
		"another agent holds the Lease": {withStranded(lost, 10*time.Minute), "node9/m9"},
		"progress within the timeout":   {withStranded(lost, time.Minute), ""},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, tc.res)
			r.lease.other = tc.other
			out := r.h.Consider(context.Background(), tc.res, nil)
			if len(r.cluster.removed) != 0 || out.Decision.Reason != plan.ReasonLearnerPresent {
				t.Fatalf("%s/%q (%s), removed %x: want learner-present, nothing removed", out.Decision.Action, out.Decision.Reason,
					out.Decision.Detail, r.cluster.removed)
			}
		})
	}
}

// An agent killed after the remove and before the journal said so resumes
// the rollback record: the learner is gone, the record closes as rolled
// back, nothing removed twice.
func TestRollbackRecordResumedAfterACrash(t *testing.T) {
	lost := cluster3(memberstate.Lost, 2, 3)
	r := newRig(t, lost)
	j := journal.Record{ID: "rb", Member: "m1", Node: "node1", Request: "auto", Kind: journal.KindRollbackLearner,
		LearnerID: strandedID, StartedAt: time.Now().UTC(), PeerURLs: []string{peerURL(1)}}
	j.Advance(journal.PhaseStarted, time.Now().UTC())
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	r.obs.onObserve = func(n int) {
		if n == 2 { // the heal considered after the rollback: not begun here
			r.lease.other = "node9/m9"
		}
	}
	r.h.Consider(context.Background(), lost, nil)
	got := r.journal(t)
	if got.Kind != journal.KindRollbackLearner || got.Result != journal.ResultSucceeded || got.Active() || got.Reason != string(plan.ReasonLearnerRolledBack) || len(r.cluster.removed) != 0 {
		t.Fatalf("resumed rollback: journal kind %q phase %s result %q reason %q, removed %x; want it closed as rolled back, no remove",
			got.Kind, got.Phase, got.Result, got.Reason, r.cluster.removed)
	}
	if r.rt.stops != 0 || r.lease.renewing {
		t.Fatalf("resumed rollback: %d stops, Lease renewing %v", r.rt.stops, r.lease.renewing)
	}
}

// Our rejoin, resumed past the remove, finds another agent's stranded
// learner at the add: removed (fenced, an Event), then ours is added.
func TestStrandedLearnerRemovedAtOurAddThenOursAdded(t *testing.T) {
	gone := cluster3(memberstate.Lost, 2, 3)
	gone.Observation.Members = gone.Observation.Members[1:] // our old member is removed
	gone.Observation.Local.Match, gone.Observation.Local.ID = observation.MatchNotFound, 0
	stranded := withStranded(gone, 10*time.Minute)
	r := newRig(t, stranded, gone)
	r.journalAt(t, "auto", journal.PhaseRemoved, 0xa1, 0)
	r.h.Consider(context.Background(), stranded, nil)
	if !slices.Equal(r.cluster.removed, []uint64{strandedID}) || !slices.Contains(r.cluster.calls, "add") {
		t.Fatalf("calls %v, removed %x: want the stranded learner %x removed, then our add", r.cluster.calls, r.cluster.removed, strandedID)
	}
	if n := r.rep.count(nodereport.ReasonLearnerRolledBack); n != 1 {
		t.Fatalf("%d %s Events, want 1", n, nodereport.ReasonLearnerRolledBack)
	}
}

// From the review: a rollback that fails is not a failed recovery of the
// member: no recoveries_total{failed}, no RecoveryFailed Event, and the
// backoff of the member's own rejoin (its failure count) is kept as it was.
func TestFailedRollbackIsNotAFailedRecovery(t *testing.T) {
	lost := cluster3(memberstate.Lost, 2, 3)
	stranded := withStranded(lost, 10*time.Minute)
	r := newRig(t, stranded)
	j := journal.Record{ID: "rb1", Member: "m1", Node: "node1", Request: "auto", Kind: journal.KindRollbackLearner,
		LearnerID: journal.MemberID(strandedID), StartedAt: time.Now().UTC(), Failures: 2}
	j.Advance(journal.PhaseStarted, time.Now().UTC())
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	r.cluster.removeErr = errBoom
	_ = r.lease.TryAcquire(context.Background(), lease.Info{})
	r.h.Consider(context.Background(), stranded, nil)
	got := r.journal(t)
	if got.Active() || got.Result == journal.ResultSucceeded {
		t.Fatalf("rollback record %s result %q (%s); want it closed, not succeeded, after the removes failed", got.Phase, got.Result, got.Message)
	}
	if got.Failures != 2 {
		t.Fatalf("failure count %d after a failed rollback, want the rejoin's 2 kept", got.Failures)
	}
	if v := testutil.ToFloat64(r.m.RecoveriesTotal.WithLabelValues("m1", journal.ResultFailed)); v != 0 {
		t.Fatalf("recoveries_total{failed} = %v for a rollback, want 0", v)
	}
	if n := r.rep.count(nodereport.ReasonRecoveryFailed); n != 0 {
		t.Fatalf("%d RecoveryFailed Events for a rollback, want none", n)
	}
}

// A rollback whose take of the Lease goes unanswered (api-unavailable)
// removes nothing and writes no record: refused, not a rollback closed
// after five tries.
func TestARollbackWhoseTakeGoesUnansweredIsRefused(t *testing.T) {
	stranded := withStranded(cluster3(memberstate.Lost, 2, 3), 10*time.Minute)
	r := newRig(t, stranded)
	r.lease.acquireDown = true
	r.h.leaseFreeSince = stranded.Observation.At.Add(-6 * time.Minute)
	out := r.h.Consider(context.Background(), stranded, nil)
	if out.Result != journal.ResultRefused || out.Decision.Reason != plan.ReasonAPIUnavailable || len(r.cluster.removed) != 0 {
		t.Fatalf("outcome %q/%q (%v), removed %x: want refused api-unavailable, nothing removed", out.Result, out.Decision.Reason, out.Err, r.cluster.removed)
	}
	if _, exists, _ := journal.Load(r.dir, "m1"); exists {
		t.Fatal("a record was written for a rollback that never took the Lease")
	}
}
