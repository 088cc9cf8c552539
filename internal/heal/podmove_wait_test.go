package heal

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// servesOnTheTarget is res with the moved member (m1) back as voter id,
// serving, and the target agent's answer on the pod: succeeded, verified,
// for that member (set on f, the facts the rig's ClaimMover reads).
func servesOnTheTarget(res memberstate.Result, f *plan.ClaimFacts, id uint64) memberstate.Result {
	moved := res
	moved.Observation.Members = append(append([]observation.Member{}, res.Observation.Members...),
		observation.Member{ID: id, Name: "m1", PeerURLs: []string{peerURL(1)}, ClientURLs: []string{"https://10.0.0.9:2379"}, Serving: true})
	f.PodNode = f.Target
	f.TargetAnswer = &plan.MoveAnswer{Result: journal.ResultSucceeded, Message: "member rejoined, promoted and verified", MemberID: id, ThisAsk: true}
	return moved
}

// releasedMove is a rig whose pod move (m1 to node9) released its claim and
// held pod at releasedAt: the member removed, PV pv-9 reserved.
func releasedMove(t *testing.T, releasedAt time.Time) (*rig, *trace, memberstate.Result, *plan.ClaimFacts) {
	t.Helper()
	res := cluster3(memberstate.Lost, 2, 3)
	res.Observation.Members = res.Observation.Members[1:] // m1 removed
	r, tr := tracedRig(t, res)
	r.journalAt(t, plan.ActionMoveAway, journal.PhaseRemoved, 0xa1, 0)
	j := r.journal(t)
	j.MoveTarget, j.StoreKey, j.ClaimReleasedAt = "node9", "k", releasedAt
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	f := &plan.ClaimFacts{Node: "node1", Target: "node9", TargetFound: true, TargetReady: true, ReservedPV: "pv-9", OldPVRetained: true}
	r.h.cfg.Claims = tracedClaims{tr: tr, f: f}
	return r, tr, res, f
}

// From issue 38 (the e2e move hung 5 minutes with the first fix): a
// released pod move waits for its member on the target without the Lease,
// never taking it again (the target's agent holds it to add the member),
// and its first wait is not an answer to the move's request: the request
// is in hand (Answered), so the agent writes no "refused" last-recovery
// for it. It closes succeeded once the member serves, verified, with
// nothing done meanwhile.
func TestAReleasedPodMoveWaitsWithoutTheLeaseAndAnswersOnlyAtItsEnd(t *testing.T) {
	clock := time.Now().UTC()
	r, tr, res, f := releasedMove(t, clock)
	r.h.now = func() time.Time { return clock }
	res.Observation.At = clock
	// The attempt's last step: its claim deleting, the held pod still here.
	f.ClaimBound, f.ClaimDeleting, f.PodOnNode = true, true, true
	_ = r.lease.TryAcquire(context.Background(), lease.Info{})
	req := &plan.Request{Action: plan.ActionMoveAway, Target: "node9"}
	out := r.h.Consider(context.Background(), res, req)
	if out.Result != "" || out.Decision.Reason != plan.ReasonAwaitingMoveTarget || !out.Answered || r.lease.Holding() || !r.journal(t).Active() {
		t.Fatalf("released, the member not on the target: outcome %+v (answered %v), Lease held %v, journal open %v; want a wait in hand, the Lease given up",
			out, out.Answered, r.lease.Holding(), r.journal(t).Active())
	}
	if ev := tr.events(); len(ev) != 2 || ev[1] != string(plan.ReleasePod) {
		t.Fatalf("steps %v, want the held pod released (fenced), then the wait", ev)
	}
	tr.reset()
	acquires := r.lease.acquires
	for i := range 3 {
		clock = clock.Add(time.Second)
		res.Observation.At = clock
		if out := r.h.Consider(context.Background(), res, nil); out.Decision.Reason != plan.ReasonAwaitingMoveTarget || !strings.Contains(out.Decision.Detail, "left") {
			t.Fatalf("poll %d: outcome %+v", i, out)
		}
	}
	// The target's agent takes the Lease to add the member: still waiting.
	r.lease.other = "node9/m1"
	if out := r.h.Consider(context.Background(), res, nil); out.Decision.Reason != plan.ReasonAwaitingMoveTarget {
		t.Fatalf("the target's agent holds the Lease: outcome %+v", out)
	}
	r.lease.other = ""
	moved := servesOnTheTarget(res, f, 0xa9)
	out = r.h.Consider(context.Background(), moved, nil)
	if out.Result != journal.ResultSucceeded || r.journal(t).Active() || !strings.Contains(r.journal(t).Message, "verified") {
		t.Fatalf("the member serves verified on the target: outcome %+v, journal %+v", out, r.journal(t))
	}
	if r.lease.acquires != acquires {
		t.Fatalf("the Lease was taken %d times while the move waited", r.lease.acquires-acquires)
	}
	if ev := tr.events(); len(ev) != 0 {
		t.Fatalf("steps or fences while waiting: %v", ev)
	}
	for _, lr := range r.rep.last {
		if lr.Result != journal.ResultSucceeded {
			t.Fatalf("last-recovery %+v written before the move's end", lr)
		}
	}
}

// From issue 38: the wait is bounded: at the deadline (MoveDeadline from
// the release) the move closes failed, move-timed-out, with nothing more
// done and the Lease never taken; its claim stays released (the member's
// future is on the target: it is not healed here).
func TestAReleasedPodMoveFailsAtItsDeadline(t *testing.T) {
	clock := time.Now().UTC()
	r, tr, res, _ := releasedMove(t, clock)
	r.h.now = func() time.Time { return clock }
	r.h.cfg.Plan.MoveDeadline = 10 * time.Minute
	res.Observation.At = clock.Add(9 * time.Minute)
	if out := r.h.Consider(context.Background(), res, nil); out.Decision.Reason != plan.ReasonAwaitingMoveTarget || !strings.Contains(out.Decision.Detail, "1m0s left") {
		t.Fatalf("within the deadline: outcome %+v", out)
	}
	clock = clock.Add(10*time.Minute + time.Second)
	res.Observation.At = clock
	out := r.h.Consider(context.Background(), res, nil)
	got := r.journal(t)
	if out.Result != journal.ResultFailed || got.Active() || got.Reason != string(plan.ReasonMoveTimedOut) || got.ClaimReleasedAt.IsZero() {
		t.Fatalf("past the deadline: outcome %+v, journal %+v", out, got)
	}
	if ev := tr.events(); len(ev) != 0 || r.lease.acquires != 0 {
		t.Fatalf("at the deadline: steps %v, %d takes of the Lease; want none", ev, r.lease.acquires)
	}
	if d := r.h.Plan(context.Background(), res, nil); d.Reason != plan.ReasonMovedAway {
		t.Fatalf("after the timed-out move: %s/%s (%s), want moved-away", d.Action, d.Reason, d.Detail)
	}
}

// From issue 38: the target's answer to a pod move names the member it
// rejoined (as a move-in's does), so that the source closes succeeded on
// that very member's verification.
func TestATargetsAnswerToAPodMoveNamesTheMemberItRejoined(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Healthy, 1, 2, 3))
	r.journalAt(t, "auto", journal.PhaseVerified, 0, 0xa9)
	j := r.journal(t)
	j.MoveFrom, j.StoreKey = "ns/etcd-1@node2", "k"
	r.h.close(context.Background(), &j, plan.Decision{Action: plan.Finish, Detail: "member rejoined, promoted and verified"}, journal.ResultSucceeded, nil)
	if len(r.rep.last) != 1 {
		t.Fatalf("last-recovery written %d times", len(r.rep.last))
	}
	if lr := r.rep.last[0]; lr.MoveFrom != j.MoveFrom || lr.MemberID != "a9" {
		t.Fatalf("the target's answer %+v: want moveFrom %s and memberID a9", lr, j.MoveFrom)
	}
	var _ nodereport.LastRecovery = r.rep.last[0]
}
