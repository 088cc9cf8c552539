package lease_test

import (
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lease"
)

// Issue 10 item 4, from the adversarial review: expiry must not be judged
// by comparing the holder's clock (renewTime) with the reader's. A holder
// whose clock is 6 s behind passed ConfirmFor(10s) on a 15 s Lease without
// renewing, and an agent with a correct clock took the Lease 9.5 s later:
// two holders inside one fenced step. As client-go's leader election does,
// a reader treats a Lease as expired only once it has seen the same record
// unchanged for a whole TTL on its own clock, and the holder counts its
// validity from its own last write.
func TestConfirmForFencesUnderClockSkew(t *testing.T) {
	for name, skew := range map[string]time.Duration{"no skew": 0, "holder 6s behind": -6 * time.Second,
		"holder 20s ahead": 20 * time.Second} {
		t.Run(name, func(t *testing.T) {
			kc, lname := newClient(t), leaseName(t)
			ctx := ctxFor(t, time.Minute)
			const ttl, need = 15 * time.Second, 10 * time.Second
			a, err := lease.New(lease.Config{Client: kc, Namespace: lab.AgentNamespace, Name: lname, Holder: "node-a/m1", TTL: ttl,
				Log: zaptest.NewLogger(t), Now: func() time.Time { return time.Now().Add(skew) }})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.TryAcquire(ctx, lease.Info{Target: "m1", Phase: "started"}); err != nil {
				t.Fatal(err)
			}
			defer a.Release(ctx)
			fencedAt := time.Now()
			if err := a.ConfirmFor(ctx, need); err != nil {
				t.Fatalf("A's fence: %v", err)
			}
			// B's clock is right and 9.5 s have passed since A's fence.
			elapsed := 9500 * time.Millisecond
			b, err := lease.New(lease.Config{Client: kc, Namespace: lab.AgentNamespace, Name: lname, Holder: "node-b/m2", TTL: ttl,
				Log: zaptest.NewLogger(t), Now: func() time.Time { return time.Now().Add(elapsed - time.Since(fencedAt)) }})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.TryAcquire(ctx, lease.Info{Target: "m2", Phase: "started"}); err == nil {
				t.Fatalf("B took the Lease %s after A's ConfirmFor(%s) passed: two holders inside one fenced step (A's clock %s off)", elapsed, need, skew)
			}
			if _, _, expired, err := b.Current(ctx); err != nil || expired {
				t.Fatalf("B's Current: expired=%v err=%v; want live (B has not watched it unchanged for a TTL)", expired, err)
			}
		})
	}
}

// A reader takes over a Lease its holder stopped renewing once it has
// watched the same record for a whole TTL, whatever the holder's clock said.
func TestAbandonedLeaseIsTakenAfterATTLOfWatching(t *testing.T) {
	kc, lname := newClient(t), leaseName(t)
	ctx := ctxFor(t, time.Minute)
	const ttl = 11 * time.Second
	clockA := time.Now().Add(-time.Hour) // far behind: by B's clock the record looks long expired
	a, err := lease.New(lease.Config{Client: kc, Namespace: lab.AgentNamespace, Name: lname, Holder: "node-a/m1", TTL: ttl,
		Log: zaptest.NewLogger(t), Now: func() time.Time { return clockA }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.TryAcquire(ctx, lease.Info{Target: "m1"}); err != nil {
		t.Fatal(err)
	}
	a.Abandon() // the holder's process dies: no renewal, no release
	start := time.Now()
	b := newLease(t, kc, lname, "node-b/m2", ttl)
	if err := b.TryAcquire(ctx, lease.Info{Target: "m2"}); err == nil {
		t.Fatal("B took the Lease at its first look: it has not watched it unchanged for a TTL")
	}
	eventually(t, 3*ttl, "B takes the abandoned Lease", func() error { return b.TryAcquire(ctx, lease.Info{Target: "m2"}) })
	if took := time.Since(start); took < ttl {
		t.Fatalf("B took the Lease after %s, less than a TTL (%s) of watching", took, ttl)
	}
}

// From the second review: the first-seen time of a record must be read
// after the record was read. A TryAcquire whose clock was read before a
// slow Get (here: the first reading lags 14 s, as a Get that took that
// long would) must not date its first look at A's fresh record back to
// then, and take A's Lease a TTL after that stale reading, inside A's
// fenced step.
func TestFirstLookIsDatedAfterTheRead(t *testing.T) {
	kc, lname := newClient(t), leaseName(t)
	ctx := ctxFor(t, time.Minute)
	const ttl, need = 15 * time.Second, 10 * time.Second
	a := newLease(t, kc, lname, "node-a/m1", ttl)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m1"}); err != nil {
		t.Fatal(err)
	}
	if err := a.ConfirmFor(ctx, need); err != nil {
		t.Fatalf("A's fence: %v", err)
	}
	calls := 0
	b, err := lease.New(lease.Config{Client: kc, Namespace: lab.AgentNamespace, Name: lname, Holder: "node-b/m2", TTL: ttl,
		Log: zaptest.NewLogger(t), Now: func() time.Time {
			calls++
			if calls == 1 {
				return time.Now().Add(-14 * time.Second) // read before a slow Get
			}
			return time.Now()
		}})
	if err != nil {
		t.Fatal(err)
	}
	a.Abandon() // A renews no more: only its fence protects the step
	if err := b.TryAcquire(ctx, lease.Info{Target: "m2", StartedAt: time.Now()}); err == nil {
		t.Fatal("B took A's fresh Lease at its first look")
	}
	time.Sleep(2 * time.Second) // a wall-clock span is what is tested: no condition to poll
	if err := b.TryAcquire(ctx, lease.Info{Target: "m2", StartedAt: time.Now()}); err == nil {
		t.Fatal("B took A's Lease 2 s after its first look: the look was dated before the read, inside A's 10 s fence")
	}
}
