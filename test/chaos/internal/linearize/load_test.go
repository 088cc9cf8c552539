package linearize

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// One real single-member lab (etcd from the repo's bin/) serves the tests
// that need etcd, started on first use: the model tests do not pay for it.
var shared = labtest.NewShared("linearize", lab.Options{Nodes: 1, NoAPIServer: true})

func TestMain(m *testing.M) { shared.Main(m) }

// A healthy member: the recorded history of puts, linearizable gets and
// CASes is linearizable, no write fails, and the same history with one
// stale read injected is caught, with its visualization written.
func TestLoadAgainstRealEtcdIsLinearizable(t *testing.T) {
	cli, err := shared.Lab(t).EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	load := Start(context.Background(), cli, Options{Seed: 12, Interval: 20 * time.Millisecond})
	defer load.Stop()
	labtest.Eventually(t, 30*time.Second, "a few seconds of load", func() error {
		if n, swapped := load.Progress(); n < 400 || swapped < 20 {
			return fmt.Errorf("%d ops done, %d CASes swapped", n, swapped)
		}
		return nil
	})
	h := load.Stop()
	r := Check(h, time.Minute, filepath.Join(t.TempDir(), "ok.html"))
	t.Logf("%s", r)
	if !r.Ok {
		t.Fatalf("real etcd history: %s", r)
	}
	if r.FailedWrites != 0 || r.FailedGets != 0 {
		t.Fatalf("ops failed against a healthy member: %s", r)
	}
	if r.PerKind[Put] == 0 || r.PerKind[Get] == 0 || r.PerKind[CAS] == r.Swapped {
		t.Fatalf("the load should mix puts, gets, and CASes that swap and that fail: %s", r)
	}
	for _, op := range h.Ops {
		if op.Revision == 0 {
			t.Fatalf("no response revision recorded for %s", op)
		}
	}

	i, stale := injectStaleRead(t, h)
	h.Ops[i].Read = stale
	viz := filepath.Join(t.TempDir(), "stale.html")
	if r := Check(h, time.Minute, viz); r.Ok || r.VizPath != viz {
		t.Fatalf("a stale read injected into the real history passed: %s", r)
	}
	if st, err := os.Stat(viz); err != nil || st.Size() == 0 {
		t.Fatalf("no visualization at %s: %v", viz, err)
	}
}

// With etcd unreachable every op times out: writes are recorded with an
// unknown outcome, gets are dropped, Stop returns within its bound, and the
// history still checks (no one saw the failed writes' values).
func TestLoadRecordsFailedOpsWhenEtcdIsUnreachable(t *testing.T) {
	cli := clientTo(t, closedPort(t))
	load := Start(context.Background(), cli, Options{Seed: 3, Interval: time.Millisecond, OpTimeout: 100 * time.Millisecond})
	labtest.Eventually(t, 10*time.Second, "ops time out", func() error {
		if n, _ := load.Progress(); n < 20 {
			return fmt.Errorf("%d ops done", n)
		}
		return nil
	})
	began := time.Now()
	h := load.Stop()
	if took := time.Since(began); took > load.Options().OpTimeout+time.Second {
		t.Fatalf("Stop took %s", took)
	}
	select {
	case <-load.Done():
	default:
		t.Fatal("workers still running after Stop")
	}
	for _, op := range h.Ops {
		if op.Known || op.Kind == Get || op.Err == "" {
			t.Fatalf("against an unreachable etcd: recorded %s", op)
		}
	}
	r := Check(h, 10*time.Second, "")
	if !r.Ok || r.FailedGets == 0 || r.FailedWrites == 0 || r.FailedWrites != len(h.Ops) || r.Indeterminate != 0 {
		t.Fatalf("got %s", r)
	}
}

// Cancelling the context ends every worker without Stop.
func TestLoadEndsWhenContextIsCancelled(t *testing.T) {
	cli := clientTo(t, closedPort(t))
	ctx, cancel := context.WithCancel(context.Background())
	load := Start(ctx, cli, Options{Clients: 5, Interval: time.Millisecond, OpTimeout: time.Hour})
	labtest.Eventually(t, 10*time.Second, "ops in flight", func() error {
		if load.inFlight() < 5 {
			return fmt.Errorf("%d ops in flight", load.inFlight())
		}
		return nil
	})
	cancel()
	select {
	case <-load.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("workers still running 5s after the context was cancelled (ops have an hour's deadline)")
	}
	// Each worker had one op in flight: its write is in the history with an
	// unknown outcome, its get is dropped.
	h := load.Stop()
	if len(h.Ops)+h.FailedGets != 5 {
		t.Fatalf("%d ops and %d failed gets, want one op per worker: %v", len(h.Ops), h.FailedGets, h.Ops)
	}
	for _, op := range h.Ops {
		if op.Known || !op.IsWrite() {
			t.Fatalf("recorded %s", op)
		}
	}
}

func (l *Load) inFlight() (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.state {
		if s == inFlight {
			n++
		}
	}
	return n
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func clientTo(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
