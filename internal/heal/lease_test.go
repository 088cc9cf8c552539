package heal

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lease"
)

// heldLease is a Lease that is held until released (only Holding and
// Release matter to leaseOf).
type heldLease struct{ held bool }

func (l *heldLease) TryAcquire(context.Context, lease.Info) error    { l.held = true; return nil }
func (l *heldLease) SetPhase(context.Context, string) error          { return nil }
func (l *heldLease) ConfirmFor(context.Context, time.Duration) error { return nil }
func (l *heldLease) Release(context.Context) error                   { l.held = false; return nil }
func (l *heldLease) Holding() bool                                   { return l.held }
func (l *heldLease) Current(context.Context) (string, lease.Info, bool, error) {
	return "", lease.Info{}, false, nil
}

// A cluster-ID change never swaps the Lease object while the old one is
// held: the held Lease would be forgotten, never released, and fencing
// would check the other cluster's Lease.
func TestLeaseOfNeverSwapsAHeldLease(t *testing.T) {
	made := map[uint64]*heldLease{}
	h := New(Config{DataDir: t.TempDir()}, nil, func(id uint64) (Lease, error) {
		made[id] = &heldLease{}
		return made[id], nil
	}, nil, nil, nil)
	l, err := h.leaseOf(1)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.TryAcquire(context.Background(), lease.Info{})
	if got, err := h.leaseOf(2); err == nil || got == Lease(made[2]) {
		t.Fatalf("leaseOf(2) while cluster 1's Lease is held = %v, %v; want an error", got, err)
	}
	if got, err := h.leaseOf(1); err != nil || got != Lease(made[1]) {
		t.Fatalf("leaseOf(1) = %v, %v; want the held Lease", got, err)
	}
	_ = made[1].Release(context.Background())
	if got, err := h.leaseOf(2); err != nil || got != Lease(made[2]) {
		t.Fatalf("leaseOf(2) once released = %v, %v; want cluster 2's Lease", got, err)
	}
}
