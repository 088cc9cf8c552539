package heal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// tracedClaims is a ClaimMover whose objects change as its steps are
// taken (the old PV retained, the target's PV reserved, the claim deleted,
// the held pod gone), each step recorded in the trace.
type tracedClaims struct {
	tr *trace
	f  *plan.ClaimFacts
}

func (c tracedClaims) Facts(context.Context, string, journal.Record, bool) plan.ClaimFacts {
	return *c.f
}

func (c tracedClaims) Do(_ context.Context, a plan.Action, _ journal.Record, _ plan.ClaimFacts) error {
	c.tr.add(string(a), true)
	switch a {
	case plan.StewardRetainPV:
		c.f.OldPVRetained = true
	case plan.ReservePV:
		c.f.ReservedPV, c.f.FreePV = c.f.FreePV, ""
	case plan.UnreservePV:
		c.f.FreePV, c.f.ReservedPV = c.f.ReservedPV, ""
	case plan.StewardDeletePVC:
		c.f.ClaimDeleting = true
	case plan.ReleasePod:
		c.f.PodOnNode, c.f.ClaimBound = false, false
	}
	return nil
}

// A pod move after its member's removal: the old PV kept, the target's PV
// reserved, the claim deleted, the held pod released, in that order, each
// fenced on the Lease for the step's own timeout right before it; then the
// move waits for its member on the target (podmove_wait_test.go) and
// closes succeeded once it serves there, verified.
func TestEveryPodMoveStepOnTheAPIIsFencedInOrder(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	res.Observation.Members = res.Observation.Members[1:] // m1 removed
	r, tr := tracedRig(t, res)
	r.journalAt(t, plan.ActionMoveAway, journal.PhaseRemoved, 0xa1, 0)
	j := r.journal(t)
	j.MoveTarget, j.StoreKey = "node9", "k"
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	f := &plan.ClaimFacts{Node: "node1", Target: "node9", TargetFound: true, TargetReady: true, FreePV: "pv-9", ClaimBound: true, PodOnNode: true}
	r.h.cfg.Claims = tracedClaims{tr: tr, f: f}
	_ = r.lease.TryAcquire(context.Background(), lease.Info{})
	if out := r.h.Consider(context.Background(), res, nil); out.Result != "" || out.Decision.Reason != plan.ReasonAwaitingMoveTarget {
		t.Fatalf("released: outcome %+v, want the wait for the target", out)
	}
	moved := servesOnTheTarget(res, f, 0xa9)
	if out := r.h.Consider(context.Background(), moved, nil); out.Result != journal.ResultSucceeded {
		t.Fatalf("the member serves verified on the target: outcome %+v", out)
	}
	var steps []string
	ev := tr.events()
	for i, e := range ev {
		if strings.HasPrefix(e, "fence(") {
			continue
		}
		need, _ := time.ParseDuration(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(ev[max(i-1, 0)], "fence("), "+data"), ")"))
		if i == 0 || !strings.HasPrefix(ev[i-1], "fence(") || need < memberChangeTimeout {
			t.Fatalf("%s not fenced right before it for its timeout: %v", e, ev)
		}
		steps = append(steps, e)
	}
	want := []string{string(plan.StewardRetainPV), string(plan.ReservePV), string(plan.StewardDeletePVC), string(plan.ReleasePod)}
	if strings.Join(steps, ",") != strings.Join(want, ",") {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	// Done: the member is not healed on this node unasked.
	if d := r.h.Plan(context.Background(), moved, nil); d.Action != plan.Nothing || d.Reason != plan.ReasonMovedAway {
		t.Fatalf("after the move: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
}

// failingRelease is tracedClaims whose release of the held pod always fails.
type failingRelease struct{ tracedClaims }

func (c failingRelease) Do(ctx context.Context, a plan.Action, j journal.Record, f plan.ClaimFacts) error {
	if a == plan.ReleasePod {
		c.tr.add(string(a), false)
		return errors.New("the API refused")
	}
	return c.tracedClaims.Do(ctx, a, j, f)
}

// From the second review: once a pod move released its claim it only goes
// forward (the step is retried past plan.MaxStepErrors, until the recovery
// timeout), and a move that fails then closes saying so (claimReleasedAt
// kept: never healed here) and what is left to do by hand.
func TestAReleasedPodMoveOnlyGoesForward(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	res.Observation.Members = res.Observation.Members[1:]
	r, tr := tracedRig(t, res)
	r.journalAt(t, plan.ActionMoveAway, journal.PhaseRemoved, 0xa1, 0)
	j := r.journal(t)
	j.MoveTarget, j.StoreKey = "node9", "k"
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	f := &plan.ClaimFacts{Node: "node1", Target: "node9", TargetFound: true, TargetReady: true, FreePV: "pv-9", ClaimBound: true, PodOnNode: true, OldPVRetained: true}
	r.h.cfg.Claims = failingRelease{tracedClaims{tr: tr, f: f}}
	_ = r.lease.TryAcquire(context.Background(), lease.Info{})
	out := r.h.Consider(context.Background(), res, nil)
	if out.Result != journal.ResultFailed {
		t.Fatalf("outcome %+v", out)
	}
	if n := strings.Count(strings.Join(tr.events(), ","), string(plan.ReleasePod)); n <= plan.MaxStepErrors {
		t.Fatalf("the release was tried %d times: a released move gave up at plan.MaxStepErrors (%d)", n, plan.MaxStepErrors)
	}
	j = r.journal(t)
	if j.ClaimReleasedAt.IsZero() || !strings.Contains(j.Message, "delete it") {
		t.Fatalf("journal: released at %v, message %q", j.ClaimReleasedAt, j.Message)
	}
	if d := r.h.Plan(context.Background(), res, nil); d.Reason != plan.ReasonMovedAway {
		t.Fatalf("after the failed, released move: %s/%s (%s), want moved-away", d.Action, d.Reason, d.Detail)
	}
}

// failingDelete is tracedClaims whose claim deletion always fails (not
// applied).
type failingDelete struct{ tracedClaims }

func (c failingDelete) Do(ctx context.Context, a plan.Action, j journal.Record, f plan.ClaimFacts) error {
	if a == plan.StewardDeletePVC {
		c.tr.add(string(a), false)
		return errors.New("the API refused")
	}
	return c.tracedClaims.Do(ctx, a, j, f)
}

// A pod move that fails before its claim goes is settled: its journal does
// not say released (the claim's deletion was journaled first, never
// applied), and its reservation is taken back, fenced on the Lease.
func TestAFailedUnreleasedPodMoveTakesItsReservationBackFenced(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	res.Observation.Members = res.Observation.Members[1:]
	r, tr := tracedRig(t, res)
	r.journalAt(t, plan.ActionMoveAway, journal.PhaseRemoved, 0xa1, 0)
	j := r.journal(t)
	j.MoveTarget, j.StoreKey = "node9", "k"
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	f := &plan.ClaimFacts{Node: "node1", Target: "node9", TargetFound: true, TargetReady: true, FreePV: "pv-9", ClaimBound: true, PodOnNode: true, OldPVRetained: true}
	r.h.cfg.Claims = failingDelete{tracedClaims{tr: tr, f: f}}
	_ = r.lease.TryAcquire(context.Background(), lease.Info{})
	if out := r.h.Consider(context.Background(), res, nil); out.Result != journal.ResultFailed {
		t.Fatalf("outcome %+v", out)
	}
	ev := tr.events()
	last := ev[len(ev)-1]
	if last != string(plan.UnreservePV) || !strings.HasPrefix(ev[len(ev)-2], "fence(") {
		t.Fatalf("the failed move did not take its reservation back, fenced right before: %v", ev)
	}
	if j := r.journal(t); !j.ClaimReleasedAt.IsZero() {
		t.Fatalf("the journal says the claim was released at %v; its deletion was never applied", j.ClaimReleasedAt)
	}
	if d := r.h.Plan(context.Background(), res, nil); d.Reason == plan.ReasonMovedAway {
		t.Fatal("an unreleased failed move tombstones the member: it would never be healed here")
	}
}
