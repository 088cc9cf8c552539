package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lease"
)

func TestNameIsDerivedFromTheClusterID(t *testing.T) {
	if got, want := lease.Name(0xcdf818194e3a8c32), "etcd-agent-recovery-cdf818194e3a8c32"; got != want {
		t.Fatalf("Name = %q, want %q", got, want)
	}
}

func TestNewRejectsAnIncompleteConfig(t *testing.T) {
	kc := newClient(t)
	for name, cfg := range map[string]lease.Config{
		"no client":    {Namespace: "ns", Name: "n", Holder: "node/m"},
		"no namespace": {Client: kc, Name: "n", Holder: "node/m"},
		"no holder":    {Client: kc, Namespace: "ns", Name: "n"},
		"negative TTL": {Client: kc, Namespace: "ns", Name: "n", Holder: "node/m", TTL: -time.Second},
	} {
		if _, err := lease.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func TestAcquireThenReleaseLetsAnotherAgentTakeItAtOnce(t *testing.T) {
	kc, name := newClient(t), leaseName(t)
	a := newLease(t, kc, name, "node-a/m1", 30*time.Second)
	b := newLease(t, kc, name, "node-b/m2", 30*time.Second)
	ctx := ctxFor(t, time.Minute)

	if err := a.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "acquired"}); err != nil {
		t.Fatal(err)
	}
	if !a.Holding() {
		t.Fatal("Holding() = false right after TryAcquire")
	}
	if err := a.Confirm(ctx); err != nil {
		t.Fatalf("Confirm by the holder: %v", err)
	}
	holder, info, expired, err := b.Current(ctx)
	if err != nil || holder != "node-a/m1" || info.Target != "m3" || expired {
		t.Fatalf("Current = %q %+v expired=%v err=%v; want node-a/m1 holding for m3", holder, info, expired, err)
	}
	requireErrorIs(t, b.TryAcquire(ctx, lease.Info{Target: "m3"}), lease.ErrHeldByOther, "node-a/m1")

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Holding() {
		t.Fatal("Holding() = true after Release")
	}
	if holder, _, _, err := b.Current(ctx); err != nil || holder != "" {
		t.Fatalf("after release Current holder = %q, err %v; want free", holder, err)
	}
	// Released, not expired: b must not have to wait for the TTL.
	if err := b.TryAcquire(ctx, lease.Info{Target: "m3"}); err != nil {
		t.Fatalf("TryAcquire right after the other's Release: %v", err)
	}
	// Release is idempotent and never frees someone else's hold.
	if err := a.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if err := b.Confirm(ctx); err != nil {
		t.Fatalf("a's second Release disturbed b's hold: %v", err)
	}
	requireErrorIs(t, a.Confirm(ctx), lease.ErrNotHeld)
}

func TestRefusesWhileHeldByAnotherAndNamesTheHolderAndPhase(t *testing.T) {
	kc, name := newClient(t), leaseName(t)
	a := newLease(t, kc, name, "node-a/m1", 30*time.Second)
	b := newLease(t, kc, name, "node-b/m2", 30*time.Second)
	ctx := ctxFor(t, time.Minute)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "quarantine"}); err != nil {
		t.Fatal(err)
	}
	err := b.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "acquired"})
	requireErrorIs(t, err, lease.ErrHeldByOther, `"node-a/m1"`, `"quarantine"`, `"m3"`)
	if b.Holding() {
		t.Fatal("the refused agent reports Holding()")
	}
	requireErrorIs(t, b.Confirm(ctx), lease.ErrNotHeld)
	requireErrorIs(t, b.SetPhase(ctx, "snapshot"), lease.ErrNotHeld)
}

func TestTakesOverALeaseWhoseHolderStoppedRenewing(t *testing.T) {
	kc, name := newClient(t), leaseName(t)
	ctx := ctxFor(t, time.Minute)
	// What a crashed agent leaves behind: its hold, renewed just now, for 2 s.
	now := metav1.NowMicro()
	dead := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.AgentNamespace,
		Annotations: map[string]string{lease.AnnotationTargetMember: "m3", lease.AnnotationPhase: "member-remove"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("node-dead/m9"), LeaseDurationSeconds: ptr[int32](2),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr[int32](4)}}
	if _, err := kc.CoordinationV1().Leases(lab.AgentNamespace).Create(ctx, dead, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := newLease(t, kc, name, "node-b/m2", 10*time.Second)
	requireErrorIs(t, b.TryAcquire(ctx, lease.Info{Target: "m3"}), lease.ErrHeldByOther, "node-dead/m9", "member-remove")

	var err error
	start := time.Now()
	eventually(t, 15*time.Second, "b takes over the expired lease", func() error {
		err = b.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "acquired"})
		if errors.Is(err, lease.ErrHeldByOther) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("takeover: %v", err)
	}
	t.Logf("taken over %s after the dead holder's last renewal", time.Since(start).Round(100*time.Millisecond))
	got := getLease(t, kc, name)
	if *got.Spec.HolderIdentity != "node-b/m2" || *got.Spec.LeaseTransitions != 5 {
		t.Fatalf("after takeover holder %q transitions %d; want node-b/m2 and 5",
			*got.Spec.HolderIdentity, *got.Spec.LeaseTransitions)
	}
	if got.Annotations[lease.AnnotationPhase] != "acquired" {
		t.Fatalf("the dead holder's phase survived the takeover: %v", got.Annotations)
	}
}

func TestConfirmFailsOnceAnotherHolderTookOverAfterAPartition(t *testing.T) {
	var cutOff partition
	name, ctx := leaseName(t), ctxFor(t, time.Minute)
	a := newLease(t, cutOff.client(t), name, "node-a/m1", 2*time.Second)
	b := newLease(t, newClient(t), name, "node-b/m2", 2*time.Second)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "snapshot"}); err != nil {
		t.Fatal(err)
	}
	cutOff.cut.Store(true)
	eventually(t, 15*time.Second, "b takes over once a's hold expired", func() error {
		return b.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "acquired"})
	})
	if a.Holding() {
		t.Fatal("a still reports Holding() after its TTL passed without renewal")
	}
	cutOff.cut.Store(false) // a comes back, still believing it is mid-recovery
	err := a.Confirm(ctx)
	requireErrorIs(t, err, lease.ErrNotHeld, "node-b/m2")
	requireErrorIs(t, a.SetPhase(ctx, "member-remove"), lease.ErrNotHeld)
	if err := b.Confirm(ctx); err != nil {
		t.Fatalf("the new holder's Confirm: %v", err)
	}
}

func TestRenewerKeepsTheLeaseBeyondItsTTL(t *testing.T) {
	kc, name, ctx := newClient(t), leaseName(t), ctxFor(t, time.Minute)
	a := newLease(t, kc, name, "node-a/m1", 2*time.Second)
	b := newLease(t, kc, name, "node-b/m2", 2*time.Second)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m3"}); err != nil {
		t.Fatal(err)
	}
	firstRenew := getLease(t, kc, name).Spec.RenewTime.Time
	// Three TTLs: without renewal b would win after the first.
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		requireErrorIs(t, b.TryAcquire(ctx, lease.Info{Target: "m3"}), lease.ErrHeldByOther)
		if !a.Holding() {
			t.Fatal("Holding() turned false while the renewer runs")
		}
	}
	if err := a.Confirm(ctx); err != nil {
		t.Fatalf("Confirm after 3 TTLs: %v", err)
	}
	if renewed := getLease(t, kc, name).Spec.RenewTime.Time; !renewed.After(firstRenew.Add(4 * time.Second)) {
		t.Fatalf("renewTime moved from %s to %s only", firstRenew, renewed)
	}
}

func TestHoldingTurnsFalseWhenARenewalFindsTheLeaseTaken(t *testing.T) {
	kc, name, ctx := newClient(t), leaseName(t), ctxFor(t, time.Minute)
	a := newLease(t, kc, name, "node-a/m1", 3*time.Second)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m3"}); err != nil {
		t.Fatal(err)
	}
	// An operator hands the Lease to someone else by hand.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := getLease(t, kc, name)
		l.Spec.HolderIdentity = ptr("operator")
		_, err := kc.CoordinationV1().Leases(lab.AgentNamespace).Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 6*time.Second, "a notices it lost the lease", func() error {
		if a.Holding() {
			return errors.New("still Holding()")
		}
		return nil
	})
	requireErrorIs(t, a.Confirm(ctx), lease.ErrNotHeld, "operator")
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := *getLease(t, kc, name).Spec.HolderIdentity; got != "operator" {
		t.Fatalf("a's Release freed a lease it no longer held: holder %q", got)
	}
}

func TestAgentRestartedMidRecoveryResumesItsOwnHold(t *testing.T) {
	var crashed partition
	kc, name, ctx := newClient(t), leaseName(t), ctxFor(t, time.Minute)
	before := newLease(t, crashed.client(t), name, "node-a/m1", 30*time.Second)
	if err := before.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "member-add"}); err != nil {
		t.Fatal(err)
	}
	transitions := *getLease(t, kc, name).Spec.LeaseTransitions
	crashed.cut.Store(true)
	after := newLease(t, kc, name, "node-a/m1", 30*time.Second)
	// Not acquired by this process yet: the fence must not pass.
	requireErrorIs(t, after.Confirm(ctx), lease.ErrNotHeld)
	if err := after.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "member-add"}); err != nil {
		t.Fatalf("the restarted holder could not resume its own lease: %v", err)
	}
	if got := *getLease(t, kc, name).Spec.LeaseTransitions; got != transitions {
		t.Fatalf("resuming our own hold counted as a transition: %d, want %d", got, transitions)
	}
}

func TestExactlyOneOfConcurrentAcquirersWins(t *testing.T) {
	kc, name, ctx := newClient(t), leaseName(t), ctxFor(t, 2*time.Minute)
	const contenders = 3
	var agents []*lease.Lease
	for i := range contenders {
		agents = append(agents, newLease(t, kc, name, fmt.Sprintf("node-%d/m%d", i, i), 30*time.Second))
	}
	// Round 0 races on Create (no Lease yet), the later ones on Update.
	for round := range 10 {
		start := make(chan struct{})
		errs := make([]error, contenders)
		var wg sync.WaitGroup
		for i, a := range agents {
			wg.Go(func() {
				<-start
				errs[i] = a.TryAcquire(ctx, lease.Info{Target: "m9", Phase: fmt.Sprint("round-", round)})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: both %d and %d acquired the lease", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, lease.ErrHeldByOther):
				t.Fatalf("round %d: contender %d: %v", round, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody acquired the lease: %v", round, errs)
		}
		holder := fmt.Sprintf("node-%d/m%d", winner, winner)
		for i, err := range errs {
			if i != winner {
				requireErrorIs(t, err, lease.ErrHeldByOther, holder)
			}
		}
		if got := *getLease(t, kc, name).Spec.HolderIdentity; got != holder {
			t.Fatalf("round %d: lease names %q, winner was %q", round, got, holder)
		}
		if err := agents[winner].Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReportsAPIUnavailableWhenTheServerCannotBeReached(t *testing.T) {
	l := newLease(t, closedPortClient(t), "etcd-agent-recovery-1", "node-a/m1", 30*time.Second)
	ctx := ctxFor(t, 30*time.Second)
	requireErrorIs(t, l.TryAcquire(ctx, lease.Info{Target: "m3"}), lease.ErrAPIUnavailable)
	if l.Holding() {
		t.Fatal("Holding() after a failed TryAcquire")
	}
	_, _, _, err := l.Current(ctx)
	requireErrorIs(t, err, lease.ErrAPIUnavailable)
	requireErrorIs(t, l.Release(ctx), lease.ErrAPIUnavailable)
}

func TestAnnotationsShowWhoHealsWhatAndHowFar(t *testing.T) {
	kc, name, ctx := newClient(t), leaseName(t), ctxFor(t, time.Minute)
	a := newLease(t, kc, name, "node-a/m1", 30*time.Second)
	started := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	if err := a.TryAcquire(ctx, lease.Info{Target: "m3", Phase: "acquired", StartedAt: started}); err != nil {
		t.Fatal(err)
	}
	got := getLease(t, kc, name)
	want := map[string]string{lease.AnnotationTargetMember: "m3", lease.AnnotationPhase: "acquired",
		lease.AnnotationStartedAt: "2026-03-04T05:06:07Z"}
	requireAnnotations(t, got, want)
	if *got.Spec.HolderIdentity != "node-a/m1" || *got.Spec.LeaseDurationSeconds != 30 {
		t.Fatalf("spec %+v; want holder node-a/m1 for 30 s", got.Spec)
	}

	if err := a.SetPhase(ctx, "snapshot"); err != nil {
		t.Fatal(err)
	}
	want[lease.AnnotationPhase] = "snapshot"
	after := getLease(t, kc, name)
	requireAnnotations(t, after, want)
	if !after.Spec.RenewTime.After(got.Spec.RenewTime.Time) {
		t.Fatalf("SetPhase did not renew: renewTime %s then %s", got.Spec.RenewTime, after.Spec.RenewTime)
	}
	if _, info, _, err := a.Current(ctx); err != nil || info != (lease.Info{Target: "m3", Phase: "snapshot", StartedAt: started}) {
		t.Fatalf("Current info %+v err %v", info, err)
	}

	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := getLease(t, kc, name)
	requireAnnotations(t, released, map[string]string{})
	if h := released.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("holderIdentity %q after Release", *h)
	}
}

func requireAnnotations(t *testing.T, l *coordinationv1.Lease, want map[string]string) {
	t.Helper()
	for _, k := range []string{lease.AnnotationTargetMember, lease.AnnotationPhase, lease.AnnotationStartedAt} {
		if got, ok := l.Annotations[k]; got != want[k] || ok != (want[k] != "") {
			t.Errorf("annotation %s = %q (present %v), want %q", k, got, ok, want[k])
		}
	}
}

func getLease(t *testing.T, kc kubernetes.Interface, name string) *coordinationv1.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := kc.CoordinationV1().Leases(lab.AgentNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func ptr[T any](v T) *T { return &v }
