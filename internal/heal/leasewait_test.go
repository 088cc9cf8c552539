package heal

import (
	"context"
	"errors"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
)

// Review finding (issue 10): when the renewer (not a fence) finds the Lease taken, the
// recovery loop does not return as on a failed fence: Decide says "wait,
// lease-held-by-other" and the loop waits inside recover until the recovery
// timeout, then closes the attempt as FAILED (failure count, backoff,
// RecoveryFailed Event, put-back) although nothing failed: another agent
// held the Lease. The idle loop (Housekeep, manual requests) is blocked
// meanwhile.
func TestLeaseTakenWhileWaitingIsNotAFailure(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3) // member 1 stopped, learner phases ahead
	r := newRig(t, res)
	r.journalAt(t, "auto", journal.PhaseMemberStarted, 0, 0xa1) // our learner started, catching up
	_ = r.lease.TryAcquire(context.Background(), lease.Info{})
	r.obs.onObserve = func(n int) {
		if n == 2 { // the renewer finds the Lease taken by node2 (ours had lapsed)
			r.lease.mu.Lock()
			r.lease.held, r.lease.other = false, "node2/m2"
			r.lease.mu.Unlock()
		}
	}
	out := r.h.Consider(context.Background(), res, nil)
	j := r.journal(t)
	if !j.Active() || !errors.Is(out.Err, lease.ErrHeldByOther) {
		t.Fatalf("journal active %v, outcome err %v: want the attempt stopped at once (lease lost), its journal open to resume", j.Active(), out.Err)
	}
	if out.Result == journal.ResultFailed || j.Failures > 0 {
		t.Errorf("attempt closed as %q (failures %d, reason %q: %s) after waiting for another agent's Lease until the recovery timeout",
			j.Result, j.Failures, j.Reason, j.Message)
	}
}

// Found by CI (stop 33, TestMemberBackBeforeTheRecheckIsLeftAlone): the
// kube-apiserver answered the Lease's read but not its take (its etcd client
// waited on the hung member), five times in a row. The attempt was closed
// FAILED although it never held the Lease and did nothing: a failure counted
// (backoff), a RecoveryFailed Event, recoveries_total{failed}. It is a
// refusal (api-unavailable), as when the read fails: no journal is written,
// the next poll asks again.
func TestALeaseThatCannotBeTakenIsARefusalNotAFailure(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	r := newRig(t, res)
	r.lease.acquireDown = true
	out := r.h.Consider(context.Background(), res, nil)
	j, exists, err := journal.Load(r.dir, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != journal.ResultRefused || out.Decision.Reason != plan.ReasonAPIUnavailable {
		t.Errorf("outcome %q/%q (%v), want refused/%s", out.Result, out.Decision.Reason, out.Err, plan.ReasonAPIUnavailable)
	}
	if exists || j.Failures != 0 {
		t.Errorf("journal written (%v): result %q, failures %d, id %q: want none for an attempt that never held the Lease",
			exists, j.Result, j.Failures, j.ID)
	}
	if n := r.rep.count(nodereport.ReasonRecoveryFailed); n != 0 {
		t.Errorf("%d RecoveryFailed events, want none", n)
	}
	if v := testutil.ToFloat64(r.m.RecoveriesTotal.WithLabelValues("m1", journal.ResultFailed)); v != 0 {
		t.Errorf("recoveries_total{failed} = %v, want 0", v)
	}
	if v := r.refusals(string(plan.ReasonAPIUnavailable)); v != 1 {
		t.Errorf("refusals_total{api-unavailable} = %v, want 1", v)
	}
	if r.rt.stops != 0 {
		t.Errorf("member stopped %d times without the Lease", r.rt.stops)
	}
	// Said once, blocked since the first poll: the polls after it (each
	// deciding Begin, then refused again) neither count nor tell it again,
	// and refused_since keeps its first time (the blocked alert's clock).
	since := testutil.ToFloat64(r.m.RefusedSince.WithLabelValues("m1", string(plan.ReasonAPIUnavailable)))
	if since == 0 {
		t.Error("refused_since{api-unavailable} not set: the blocked alert never fires")
	}
	clock := time.Now().Add(time.Hour)
	r.h.now = func() time.Time { return clock }
	for range 3 {
		r.h.Consider(context.Background(), res, nil)
	}
	if v := r.refusals(string(plan.ReasonAPIUnavailable)); v != 1 {
		t.Errorf("after 4 polls: refusals_total{api-unavailable} = %v, want 1", v)
	}
	if n := r.rep.count(nodereport.ReasonRecoveryRefused); n != 1 {
		t.Errorf("after 4 polls: %d RecoveryRefused events, want 1", n)
	}
	if v := testutil.ToFloat64(r.m.RefusedSince.WithLabelValues("m1", string(plan.ReasonAPIUnavailable))); v != since {
		t.Errorf("refused_since{api-unavailable} moved from %v to %v while the take stayed unanswered", since, v)
	}
	// The API answers again: the next poll begins, with no backoff.
	r.lease.acquireDown = false
	if out := r.h.Consider(context.Background(), res, nil); r.lease.acquires != 1 {
		t.Errorf("after the API came back: %d acquires (outcome %q/%q), want the recovery begun at once", r.lease.acquires, out.Result, out.Decision.Reason)
	}
	if v := testutil.ToFloat64(r.m.RefusedSince.WithLabelValues("m1", string(plan.ReasonAPIUnavailable))); v != 0 {
		t.Errorf("refused_since{api-unavailable} = %v once the Lease was taken, want 0", v)
	}
}

// Review of the fix above: a take that fails five times for another
// reason (RBAC, a conflict) still closes the attempt failed, with the
// record it would have opened: the member's last recovery (here one that
// succeeded) is never rewritten as this failure, and the failure counts
// (backoff).
func TestATakeThatKeepsFailingClosesItsOwnRecordNotTheLastOne(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	r := newRig(t, res)
	last := journal.Record{ID: "old1", Member: "m1", Node: "node1", Request: "manual", StartedAt: time.Now().Add(-48 * time.Hour).UTC(),
		Result: journal.ResultSucceeded, PeerURLs: []string{peerURL(1)}}
	last.Advance(journal.PhaseStarted, last.StartedAt)
	last.Advance(journal.PhaseDone, last.StartedAt.Add(time.Minute))
	if err := journal.Save(r.dir, last); err != nil {
		t.Fatal(err)
	}
	r.lease.acquireFails = 1000
	out := r.h.Consider(context.Background(), res, nil)
	j := r.journal(t)
	if out.Result != journal.ResultFailed || j.Result != journal.ResultFailed || j.Failures != 1 {
		t.Fatalf("outcome %q, journal %q with failures %d: want the attempt closed failed, its failure counted", out.Result, j.Result, j.Failures)
	}
	if j.ID == last.ID || j.Request != "auto" || !j.StartedAt.After(last.StartedAt) {
		t.Errorf("closed record %q (request %q, started %s): the last recovery %q rewritten as this attempt's failure", j.ID, j.Request, j.StartedAt, last.ID)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "journal-.json")); !os.IsNotExist(err) {
		t.Errorf("a journal without a member name was written (stat: %v)", err)
	}
}

// A take of the Lease that fails changes nothing the next take decides on:
// the first rejoin on a PV a move reserved is still seeded from the move's
// stored snapshot (begin gave the record a new ID before the take, so the
// retry took it for a later rejoin and dropped the stored seed).
func TestAFailedTakeOfTheLeaseKeepsTheStoredSeed(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	r := newRig(t, res)
	r.h.cfg.StoreSeed = &StoreSeed{Key: "etcd-agent/c1/move.db", From: "node9", ClusterID: 0xc1}
	r.h.holdPoints = func() []string { return []string{HoldLeaseAcquired} } // the test looks at the journal as the Lease is taken
	r.lease.acquireFails = 1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); r.h.Consider(ctx, res, nil) }()
	var j journal.Record
	for deadline := time.Now().Add(10 * time.Second); ; {
		var ok bool
		j, ok, _ = journal.Load(r.dir, "m1")
		if ok && j.Active() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no journal opened within 10s (acquires %d)", r.lease.acquires)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if j.StoreKey != "etcd-agent/c1/move.db" || j.MoveFrom != "node9" {
		t.Fatalf("journal after a failed take: store key %q, from %q: want the move's stored snapshot", j.StoreKey, j.MoveFrom)
	}
}

// A recovery that resumes (an agent restart mid-heal) while the API server
// answers the Lease's read but not its take: each take was a failed step,
// and after five the attempt closed failed (backoff, RecoveryFailed, the
// stopped member put back or left stopped) though it never held the Lease
// and nothing it did went wrong. It now waits, with its journal open, as
// when another agent holds the Lease, and resumes once a take is answered.
func TestAResumedRecoveryWhoseTakeGoesUnansweredWaitsWithItsJournalOpen(t *testing.T) {
	gone := cluster3(memberstate.Lost, 2, 3)
	gone.Observation.Members = gone.Observation.Members[1:] // our old member is removed
	r := newRig(t, gone)
	r.journalAt(t, "auto", journal.PhaseRemoved, 0xa1, 0)
	r.lease.acquireDown = true
	for range 3 {
		out := r.h.Consider(context.Background(), gone, nil)
		if out.Result != "" || out.Decision.Reason != plan.ReasonAPIUnavailable {
			t.Fatalf("outcome %q/%q (%v), want the recovery left open, waiting on %s", out.Result, out.Decision.Reason, out.Err, plan.ReasonAPIUnavailable)
		}
	}
	j := r.journal(t)
	if !j.Active() || j.Phase != journal.PhaseRemoved || j.Failures != 0 {
		t.Fatalf("journal %q in phase %s, failures %d: want it open in phase removed, no failure", j.Result, j.Phase, j.Failures)
	}
	if n := r.rep.count(nodereport.ReasonRecoveryFailed); n != 0 {
		t.Errorf("%d RecoveryFailed events, want none", n)
	}
	if v := r.refusals(string(plan.ReasonAPIUnavailable)); v != 1 {
		t.Errorf("refusals_total{api-unavailable} = %v after three polls, want 1 (said once)", v)
	}
	if v := testutil.ToFloat64(r.m.RefusedSince.WithLabelValues("m1", string(plan.ReasonAPIUnavailable))); v == 0 {
		t.Error("refused_since{api-unavailable} not set while the resume waits")
	}
	if r.rt.starts != 0 || r.rt.stops != 0 {
		t.Errorf("runtime started %d, stopped %d times without the Lease", r.rt.starts, r.rt.stops)
	}
	r.lease.acquireDown = false
	r.h.Consider(context.Background(), gone, nil)
	if r.lease.acquires == 0 {
		t.Fatal("the API answers again: the recovery was not resumed")
	}
	if v := testutil.ToFloat64(r.m.RefusedSince.WithLabelValues("m1", string(plan.ReasonAPIUnavailable))); v != 0 {
		t.Errorf("refused_since{api-unavailable} = %v once the Lease was taken, want 0", v)
	}
}

// Review of the fix above: a member the killed attempt parked (stop tried,
// never removed, data dir intact) must not stay stopped for as long as the
// takes go unanswered: that open journal still fails after five takes, and
// the failed attempt starts the member again as it was (putBack).
func TestAParkedMemberOfAResumedRecoveryIsPutBackWhenTheTakesGoUnanswered(t *testing.T) {
	res := cluster3(memberstate.Healthy, 2, 3) // m1 parked: not serving, its data ok and verified
	r := newRig(t, res)
	r.journalAt(t, "rejoin", journal.PhaseStarted, 0xa1, 0)
	j := r.journal(t)
	j.StopAttemptedAt = j.StartedAt
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	r.rt.stops = 1 // parked by the killed agent
	r.lease.acquireDown = true
	for range 20 {
		r.h.Consider(context.Background(), res, nil)
	}
	if r.rt.starts == 0 {
		t.Fatalf("after 20 polls of unanswered takes the parked member (data intact, never removed) is still stopped; journal phase %s open=%v",
			r.journal(t).Phase, r.journal(t).Active())
	}
}

// Review of the fix above: an open journal whose Lease read fails on one
// poll (a wait on api-unavailable) and whose take goes unanswered on the
// next is one outage: one refusal, one Event, one refused_since.
func TestAnOutageThatFlipsBetweenReadAndTakeIsOneRefusal(t *testing.T) {
	gone := cluster3(memberstate.Lost, 2, 3)
	gone.Observation.Members = gone.Observation.Members[1:]
	r := newRig(t, gone)
	r.journalAt(t, "auto", journal.PhaseRemoved, 0xa1, 0)
	var since float64
	for i := range 6 {
		r.lease.apiDown, r.lease.acquireDown = i%2 == 1, i%2 == 0
		r.h.Consider(context.Background(), gone, nil)
		v := testutil.ToFloat64(r.m.RefusedSince.WithLabelValues("m1", string(plan.ReasonAPIUnavailable)))
		if v == 0 || (since != 0 && v != since) {
			t.Fatalf("poll %d: refused_since{api-unavailable} = %v (first %v): want it set once and kept", i, v, since)
		}
		since = v
	}
	if v := r.refusals(string(plan.ReasonAPIUnavailable)); v != 1 {
		t.Errorf("refusals_total{api-unavailable} = %v over one outage, want 1", v)
	}
	if n := r.rep.count(nodereport.ReasonRecoveryRefused); n != 1 {
		t.Errorf("%d RecoveryRefused events over one outage, want 1", n)
	}
}

// The same member, parked by a killed attempt, with the API fully down
// after the restart: the open journal cannot even read its Lease, and it
// waited with the member stopped for as long as the outage lasted. It is
// put back after five such polls, as after five unanswered takes; a member
// the attempt quarantined stays stopped (nothing intact to start).
func TestAParkedMemberOfAResumedRecoveryIsPutBackWhenTheLeaseCannotBeRead(t *testing.T) {
	for _, quarantined := range []bool{false, true} {
		t.Run(map[bool]string{false: "data intact", true: "data quarantined"}[quarantined], func(t *testing.T) {
			res := cluster3(memberstate.Healthy, 2, 3) // m1 parked: not serving, its data ok and verified
			r := newRig(t, res)
			r.journalAt(t, "rejoin", journal.PhaseStarted, 0xa1, 0)
			j := r.journal(t)
			j.StopAttemptedAt = j.StartedAt
			if quarantined {
				j.QuarantinePath = filepath.Join(r.dir, "data-quarantined")
			}
			if err := journal.Save(r.dir, j); err != nil {
				t.Fatal(err)
			}
			r.rt.stops = 1 // parked by the killed agent
			r.lease.apiDown = true
			for i := range 20 {
				out := r.h.Consider(context.Background(), res, nil)
				if i < 4 && (r.rt.starts != 0 || !r.journal(t).Active()) {
					t.Fatalf("poll %d: started %d, journal open %v (%+v): a short outage is waited out", i, r.rt.starts, r.journal(t).Active(), out.Decision)
				}
			}
			if quarantined {
				if r.rt.starts != 0 {
					t.Fatalf("a member whose data the attempt quarantined was started")
				}
				return
			}
			if r.rt.starts == 0 || r.journal(t).Active() {
				t.Fatalf("after 20 polls that could not read the Lease the parked member (data intact, never removed) is still stopped (starts %d); journal phase %s open=%v",
					r.rt.starts, r.journal(t).Phase, r.journal(t).Active())
			}
			if j := r.journal(t); j.Result != journal.ResultFailed || j.PutBack == "" {
				t.Errorf("journal closed %q, put back %q: want failed, saying the member was started again", j.Result, j.PutBack)
			}
		})
	}
}
