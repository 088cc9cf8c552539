package heal

import (
	"context"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Issue 10 item 4: a recovery that fails before anything was removed puts
// the member back when its data is intact: here a manual rejoin whose stop
// parks the manifest but then keeps failing (the process never exits in
// time). Before, the attempt failed and left the member stopped, the
// cluster at zero fault tolerance.
func TestFailedStopPutsTheMemberBack(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	r := newRig(t, res)
	r.rt.stopErr = errBoom
	out := r.h.Consider(context.Background(), res, &plan.Request{Action: "rejoin"})
	if out.Result != journal.ResultFailed {
		t.Fatalf("result %q (%v), want failed", out.Result, out.Err)
	}
	if r.rt.starts != 1 {
		t.Fatalf("the member stopped by the failed attempt was started %d times, want once (stops %d)", r.rt.starts, r.rt.stops)
	}
	j := r.journal(t)
	if !strings.Contains(j.PutBack, "restarted") {
		t.Fatalf("journal putBack %q, want it to say the member was restarted", j.PutBack)
	}
	if n := r.rep.count(nodereport.ReasonMemberRestarted); n != 1 {
		t.Fatalf("%d MemberRestarted Events, want 1", n)
	}
}

// The other side: once the data dir is quarantined the member is not
// intact, and a failed attempt leaves it stopped (the next attempt rejoins
// it); the journal and an Event say so.
func TestFailedAttemptAfterTheQuarantineLeavesTheMemberStopped(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	r := newRig(t, res)
	r.journalAt(t, "auto", journal.PhaseStopped, 0xa1, 0)
	j := r.journal(t)
	j.StopAttemptedAt, j.QuarantinePath = j.StartedAt, r.dir+"/q/data-1"
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	r.rt.stops = 1 // stopped by this attempt
	r.h.fail(context.Background(), &j, plan.Decision{Action: plan.StopMember}, errBoom)
	if r.rt.starts != 0 {
		t.Fatalf("a member whose data dir was quarantined was started %d times", r.rt.starts)
	}
	if j := r.journal(t); !strings.Contains(j.PutBack, "quarantined") {
		t.Fatalf("journal putBack %q, want it to say why the member stays stopped", j.PutBack)
	}
	if n := r.rep.count(nodereport.ReasonMemberLeftStopped); n != 1 {
		t.Fatalf("%d MemberLeftStopped Events, want 1", n)
	}
}

// A step's shell that refuses (what it would act on is not what was decided
// on: a pod re-created on another claim) ends the attempt at once with its
// reason, not after five tries of the same answer; the member is put back.
func TestAStepRefusalEndsTheAttemptAtOnceWithItsReason(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	r := newRig(t, res)
	r.rt.stopErr = plan.Refused(plan.ReasonMemberDataMoved, errBoom)
	out := r.h.Consider(context.Background(), res, &plan.Request{Action: "rejoin"})
	if out.Result != journal.ResultFailed || out.Decision.Reason != plan.ReasonMemberDataMoved {
		t.Fatalf("result %q reason %q (%v), want failed with %s", out.Result, out.Decision.Reason, out.Err, plan.ReasonMemberDataMoved)
	}
	if r.rt.stops != 1 {
		t.Fatalf("the refused stop was tried %d times, want once", r.rt.stops)
	}
	if r.rt.starts != 1 {
		t.Fatalf("the member the refused stop may have held was started %d times, want once (put back)", r.rt.starts)
	}
	if got := testutil.ToFloat64(r.m.RefusalsTotal.WithLabelValues("m1", string(plan.ReasonMemberDataMoved))); got != 1 {
		t.Fatalf("refusals_total{reason=%s} = %v, want 1", plan.ReasonMemberDataMoved, got)
	}
	if j := r.journal(t); j.Reason != string(plan.ReasonMemberDataMoved) || j.Active() {
		t.Fatalf("journal reason %q, active %v", j.Reason, j.Active())
	}
}
