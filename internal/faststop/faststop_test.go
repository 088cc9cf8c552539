package faststop

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// fakeLooker plays a list of looks, then repeats the last one.
type fakeLooker struct {
	mu    sync.Mutex
	looks []plan.FastStopFacts
	n     int
}

func (f *fakeLooker) look(context.Context) plan.FastStopFacts {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := min(f.n, len(f.looks)-1)
	f.n++
	return f.looks[i]
}
func (f *fakeLooker) close() {}

// fakeProc is etcd as a parent PID: it exits (the parent changes) after
// gone parent() calls, or once ended.
type fakeProc struct {
	mu     sync.Mutex
	pid    int
	calls  int
	gone   int // 0: never on its own
	ended  []int
	exited bool
}

func (p *fakeProc) parent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.exited || (p.gone > 0 && p.calls >= p.gone) {
		return 1
	}
	return p.pid
}

func (p *fakeProc) end(pid int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = append(p.ended, pid)
	p.exited = true
	return nil
}

var (
	serving  = plan.FastStopFacts{Served: true}
	stopping = plan.FastStopFacts{Served: true, Drained: true, ClientRefused: true, QuietFor: plan.FastStopQuiet}
	withDB   = plan.FastStopFacts{Served: true, Drained: true, ClientRefused: true, DBOnDisk: true}
	inFlight = plan.FastStopFacts{Served: true, Drained: true, ClientRefused: true, UnaryInFlight: 2}
)

func runWatch(t *testing.T, looks []plan.FastStopFacts, proc *fakeProc) []observer.LoggedEntry {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	c := Config{ParentPID: proc.pid, ClientURL: "http://x:1", MetricsURL: "http://x:2", DataDir: "/d", Poll: time.Millisecond, Log: zap.New(core)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := watch(ctx, c, &fakeLooker{looks: looks}, proc); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the watch did not end by itself")
	}
	return logs.All()
}

// A serving etcd, or a stopping one with its db on disk or a request in
// flight, is never ended; the watch ends with etcd.
func TestTheStopWatchNeverEndsEtcdWithSomethingToLose(t *testing.T) {
	for name, looks := range map[string][]plan.FastStopFacts{
		"serving":            {serving},
		"db on disk":         {serving, withDB},
		"requests in flight": {serving, inFlight},
	} {
		t.Run(name, func(t *testing.T) {
			proc := &fakeProc{pid: 42, gone: 50}
			logs := runWatch(t, looks, proc)
			if len(proc.ended) > 0 {
				t.Fatalf("etcd ended (%v) with %s", proc.ended, name)
			}
			if last := logs[len(logs)-1].Message; !strings.Contains(last, "etcd has exited") {
				t.Fatalf("last log line %q, want the watch's end", last)
			}
		})
	}
}

// A stopping etcd with nothing to lose is ended once, with SIGHUP's
// stand-in, and the log says why; before that, its verdict while stopping
// is logged once per change.
func TestTheStopWatchEndsAStoppingEtcdWithNothingToLose(t *testing.T) {
	proc := &fakeProc{pid: 42}
	logs := runWatch(t, []plan.FastStopFacts{serving, serving, inFlight, inFlight, stopping}, proc)
	if len(proc.ended) != 1 || proc.ended[0] != 42 {
		t.Fatalf("ended %v, want [42]", proc.ended)
	}
	var msgs []string
	for _, e := range logs {
		v, _ := e.ContextMap()["verdict"].(string)
		msgs = append(msgs, e.Message+" "+v)
	}
	text := strings.Join(msgs, "\n")
	if strings.Count(text, "requests-in-flight") != 1 || strings.Count(text, string(plan.FastStopNow)) != 1 ||
		!strings.Contains(text, "etcd ended without its graceful wait") {
		t.Fatalf("log:\n%s", text)
	}
}

// An etcd gone between the look and the end is not signalled (its PID
// may be another process's by then).
func TestTheStopWatchNeverSignalsAnExitedEtcd(t *testing.T) {
	proc := &fakeProc{pid: 42, gone: 2} // the second parent() call: right before the end
	runWatch(t, []plan.FastStopFacts{stopping}, proc)
	if len(proc.ended) > 0 {
		t.Fatalf("signalled %v after etcd exited", proc.ended)
	}
}

// The unary requests in flight are the started minus the handled ones,
// of unary calls only (streams never end while etcd serves).
func TestInFlightCountsUnaryRequestsOnly(t *testing.T) {
	const text = `# TYPE etcd_server_is_leader gauge
etcd_server_is_leader 0
# TYPE grpc_server_started_total counter
grpc_server_started_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 10
grpc_server_started_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 5
grpc_server_started_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 7
# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 10
grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 3
grpc_server_handled_total{grpc_code="Unavailable",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 1
`
	c, err := parseCounts(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if c.isLeader || c.started != 15 || c.inFlight != 1 {
		t.Fatalf("got %+v, want follower, 15 started, 1 in flight", c)
	}
	if _, err := parseCounts(strings.NewReader("# TYPE etcd_server_is_leader gauge\netcd_server_is_leader 1\n")); err == nil {
		t.Fatal("no gRPC counters: want an error (requests in flight unknown)")
	}
}
