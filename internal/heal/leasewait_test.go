package heal

import (
	"context"
	"errors"
	"testing"

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
