package heal

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/metrics"
)

// parkingRuntime is the static-pod runtime as the kubelet sees it: Stop
// parks the manifest at once (the irreversible act) and then waits for the
// process, which goes only when the kubelet gets to it.
type parkingRuntime struct {
	parked, processAlive atomic.Bool
}

func (p *parkingRuntime) Stop(ctx context.Context) error {
	p.parked.Store(true)
	<-ctx.Done() // the kubelet is slow; etcd still serves
	return ctx.Err()
}
func (p *parkingRuntime) Start(context.Context, string) error { p.parked.Store(false); return nil }
func (p *parkingRuntime) Stopped() (bool, error)              { return p.parked.Load(), nil }
func (p *parkingRuntime) Describe() string                    { return "parking" }

type releaseWatch struct {
	*fakeLease
	rt            *parkingRuntime
	releasedAlive atomic.Bool
}

func (l *releaseWatch) Release(ctx context.Context) error {
	if l.rt.parked.Load() && l.rt.processAlive.Load() {
		l.releasedAlive.Store(true)
	}
	return l.fakeLease.Release(ctx)
}

// Review finding (issue 10): SIGTERM (a DaemonSet rolling update) while the stop waits
// for etcd to go releases the Lease at once: the manifest is parked, the
// member is still going down (still serving, for all another agent can
// see), and the next agent may take the Lease and stop its own member on
// an observation that counts ours as serving.
func TestShutdownMidStopKeepsTheLeaseWhileTheMemberGoesDown(t *testing.T) {
	dir := t.TempDir()
	rt := &parkingRuntime{}
	rt.processAlive.Store(true)
	fl := &releaseWatch{fakeLease: &fakeLease{}, rt: rt}
	res := cluster3(memberstate.Lost, 2, 3)
	h := New(Config{Member: "m1", Node: "node1", PeerURLs: []string{peerURL(1)}, DataDir: dir + "/data", StateDir: dir,
		Plan: planConfig(), RecoveryTimeout: time.Minute, StepInterval: 5 * time.Millisecond, Cluster: &fakeCluster{}},
		&fakeObserver{res: []memberstate.Result{res}}, func(uint64) (Lease, error) { return fl, nil }, rt, &fakeReporter{}, metrics.New())
	h.stopSlice = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !rt.parked.Load() {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		cancel() // SIGTERM
	}()
	out := h.Consider(ctx, res, nil)
	if !rt.parked.Load() || !errors.Is(out.Err, context.Canceled) {
		t.Fatalf("outcome %+v, parked %v: want the shutdown to land while the stop was in flight", out, rt.parked.Load())
	}
	if fl.releasedAlive.Load() {
		t.Errorf("the Lease was released while the member's manifest was parked and its process still running: another agent may now act on an observation that counts it as serving")
	}
}
