package lease_test

import (
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lease"
)

// skewedLease is a holder whose clock runs behind by *behind: acquiring with
// the clock 25 s behind leaves a 30 s hold that, read with a true clock, has
// only 5 s left (as just before a renewal that failed once).
func skewedLease(t *testing.T, name, holder string, ttl time.Duration, behind *atomic.Int64) *lease.Lease {
	t.Helper()
	kc := newClient(t)
	l, err := lease.New(lease.Config{Client: kc, Namespace: lab.AgentNamespace, Name: name, Holder: holder, TTL: ttl,
		Log: zaptest.NewLogger(t), Now: func() time.Time { return time.Now().Add(-time.Duration(behind.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(ctxFor(t, 10*time.Second)) })
	return l
}

// Issue 10 item 4: the fence before a step must guarantee the hold outlives
// the step. Confirm accepts any positive remaining validity (here 5 s while
// the step may take 10 s); ConfirmFor renews first (a write under the
// Lease's resourceVersion) and passes only with more than need left.
func TestConfirmForRenewsWhenTheHoldEndsBeforeTheStepCould(t *testing.T) {
	name, ctx := leaseName(t), ctxFor(t, time.Minute)
	var behind atomic.Int64
	behind.Store(int64(25 * time.Second))
	a := skewedLease(t, name, "node-a/m1", 30*time.Second, &behind)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m1", Phase: "started"}); err != nil {
		t.Fatal(err)
	}
	behind.Store(0)
	left := func() time.Duration {
		l := getLease(t, newClient(t), name)
		return time.Until(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
	}
	if got := left(); got > 6*time.Second {
		t.Fatalf("setup: %s of the hold left, want about 5 s", got)
	}
	if err := a.ConfirmFor(ctx, 10*time.Second); err != nil {
		t.Fatalf("ConfirmFor(10s) by the holder with 5 s left: %v; want a renewal and nil", err)
	}
	if got := left(); got <= 10*time.Second {
		t.Fatalf("after ConfirmFor(10s) the hold has %s left; a 10 s step would outlive it", got)
	}
	// Enough left: no write needed, the read alone passes.
	if err := a.ConfirmFor(ctx, time.Second); err != nil {
		t.Fatalf("ConfirmFor(1s): %v", err)
	}
}

// A step longer than a fresh hold can ever be fenced is refused, never run
// on a hold that ends in the middle of it.
func TestConfirmForRefusesAStepLongerThanTheTTL(t *testing.T) {
	kc, name, ctx := newClient(t), leaseName(t), ctxFor(t, time.Minute)
	a := newLease(t, kc, name, "node-a/m1", 5*time.Second)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m1"}); err != nil {
		t.Fatal(err)
	}
	if err := a.ConfirmFor(ctx, 5*time.Second); err == nil {
		t.Fatal("ConfirmFor(5s) on a 5 s Lease passed; the hold cannot outlive the step")
	}
}

// The renewal inside ConfirmFor never takes a Lease back: another holder's
// Lease fails the fence with ErrNotHeld and stays theirs.
func TestConfirmForNeverRenewsAnotherHoldersLease(t *testing.T) {
	kc, name, ctx := newClient(t), leaseName(t), ctxFor(t, time.Minute)
	a := newLease(t, kc, name, "node-a/m1", 30*time.Second)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m1"}); err != nil {
		t.Fatal(err)
	}
	// Another agent took it (its hold valid for 2 s only: a renewal would be tempting).
	got := getLease(t, kc, name)
	now := metav1.NowMicro()
	got.Spec.HolderIdentity, got.Spec.RenewTime, got.Spec.LeaseDurationSeconds = ptr("node-b/m2"), &now, ptr[int32](2)
	if _, err := kc.CoordinationV1().Leases(lab.AgentNamespace).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	requireErrorIs(t, a.ConfirmFor(ctx, 10*time.Second), lease.ErrNotHeld, "node-b/m2")
	if h := *getLease(t, kc, name).Spec.HolderIdentity; h != "node-b/m2" {
		t.Fatalf("holder %q after a's fence, want node-b/m2", h)
	}
}
