package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
)

type fakeStatusWriter struct {
	mu      sync.Mutex
	fail    int // the next writes that fail
	written []string
}

func (f *fakeStatusWriter) SetStatus(_ context.Context, s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return errors.New("api down")
	}
	f.written = append(f.written, s)
	return nil
}

func (f *fakeStatusWriter) last() (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.written) == 0 {
		return "", 0
	}
	return f.written[len(f.written)-1], len(f.written)
}

// The member's state reaches the Node once per change, the newest line
// wins, and a write the API refused is retried until it lands.
func TestNodeStatusIsWrittenOncePerChangeAndRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &fakeStatusWriter{fail: 2}
	s := startNodeStatus(ctx, w, zap.NewNop(), 20*time.Millisecond)
	res := memberstate.Result{Observation: observation.Observation{Local: observation.Local{DataDirClass: observation.DataDirMissing}},
		Verdict: memberstate.Verdict{State: memberstate.Lost, Reason: "data-dir-missing"}}
	s.publish(statusLine("node2", res, nil))
	want := statusLine("node2", res, nil)
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, _ := w.last()
		return got == want, nil
	}); err != nil {
		got, n := w.last()
		t.Fatalf("status on the Node %q after %d writes, want %q (two failed writes retried)", got, n, want)
	}
	if _, n := w.last(); n != 1 {
		t.Fatalf("%d writes landed for one change, want 1", n)
	}
}

// Seen in an e2e run: a poll whose probes timed out mid-heal made the
// Node's line say "MAJORITY LOST: quorum is gone, the agent will not act;
// recovery in progress" while the heal went on. Mid-recovery the agent
// waits (nothing destructive) until the quorum is back; the line says so.
func TestTheStatusLineSaysARecoveryWaitsForTheQuorum(t *testing.T) {
	res := memberstate.Result{Verdict: memberstate.Verdict{State: memberstate.Recovering, Reason: "data-dir-missing", MajorityLost: true}}
	line := statusLine("node2", res, nil)
	if strings.Contains(line, "will not act") || !strings.Contains(line, "the recovery waits") {
		t.Fatalf("mid-recovery: %q", line)
	}
	res.Verdict.State = memberstate.Lost
	if line := statusLine("node2", res, nil); !strings.Contains(line, "the agent will not act") {
		t.Fatalf("no recovery running: %q", line)
	}
}
