package agent

import (
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The status file is what `etcd-agent status` and people read: a write
// that fails is logged, once per change of error (it is written on every
// change of state or decision), and its recovery is said too.
func TestStatusFileWriteFailureIsLoggedOncePerChange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	core, logs := observer.New(zap.InfoLevel)
	r := &reporter{log: zap.New(core), member: "m1", statusPath: filepath.Join(dir, StatusFile)}
	res := memberstate.Result{}
	for i, d := range []plan.Action{plan.Nothing, plan.Refuse, plan.Begin} {
		r.decided(res, plan.Decision{Action: d, Detail: string(rune('a' + i))})
	}
	if n := logs.FilterMessageSnippet("status file").Len(); n != 1 {
		t.Fatalf("3 failed status writes logged %d times, want once: %v", n, logs.All())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.decided(res, plan.Decision{Action: plan.Nothing, Detail: "d"})
	if _, err := os.Stat(filepath.Join(dir, StatusFile)); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("status file").Len(); n != 2 {
		t.Fatalf("the status file written again: %d lines about it, want 2 (failed, written again): %v", n, logs.All())
	}
}

// The metrics server's errors reach the agent's logger (they went to
// zap.L(), a no-op: an agent whose /metrics died said nothing).
func TestMetricsServerErrorsAreLogged(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var ready atomic.Bool
	srv := serveOn(ln, metrics.New(), &ready, nil, false, zap.New(core))
	t.Cleanup(func() { srv.Close() })
	ln.Close() // Serve fails: not a shutdown
	deadline := time.Now().Add(10 * time.Second)
	for logs.FilterMessageSnippet("metrics server").Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the metrics server's failure was not logged: %v", logs.All())
		}
		<-time.After(5 * time.Millisecond) // poll
	}
}

// The healer, the quarantine prune and the steward never decide on a
// routine poll that reused the other members' last probe: a healthy one
// needs no decision; anything else is decided on a full observation.
func TestOnlyFullObservationsAreDecidedOn(t *testing.T) {
	reused := func(state memberstate.State) memberstate.Result {
		r := memberstate.Result{Verdict: memberstate.Verdict{State: state}}
		r.Observation.PeersReused = true
		return r
	}
	full := memberstate.Result{Verdict: memberstate.Verdict{State: memberstate.Healthy}}
	manual := &plan.Request{Action: "rejoin"}
	for _, c := range []struct {
		name string
		r    memberstate.Result
		req  *plan.Request
		want useOfResult
	}{
		{"full, healthy", full, nil, decideOnIt},
		{"full, manual request", full, manual, decideOnIt},
		{"reused, healthy", reused(memberstate.Healthy), nil, nothingToDecide},
		{"reused, healthy, manual request", reused(memberstate.Healthy), manual, observeAfresh},
		{"reused, degraded (data dir wiped under a serving member)", reused(memberstate.Degraded), nil, observeAfresh},
		{"reused, lost", reused(memberstate.Lost), nil, observeAfresh},
	} {
		if got := decideOn(c.r, c.req); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
