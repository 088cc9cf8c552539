package agent

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Two agent processes on one state dir (a DaemonSet rolled with a surge, an
// agent started by hand beside the running one) would each take the other's
// files for a killed agent's: the newcomer's first poll removes part files,
// seed streams and an untaken backup the other may be about to journal. The
// second waits, bounded and logged, then fails with a clear error; it runs
// once the first has let go.
func TestASecondAgentOnTheSameStateDirWaitsThenFails(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockStateDir(context.Background(), dir, time.Second, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := lockStateDir(context.Background(), dir, 300*time.Millisecond, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "another etcd-agent") {
		t.Fatalf("a second lock of %s: %v, want refused naming another etcd-agent", dir, err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("the second agent waited %s, want about its bound", took)
	}
	core, logs := observer.New(zap.InfoLevel)
	got := make(chan error, 1)
	go func() {
		u, err := lockStateDir(context.Background(), dir, 10*time.Second, zap.New(core))
		if err == nil {
			u()
		}
		got <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); logs.FilterMessageSnippet("waiting").Len() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the second agent never said it waits")
		}
		time.Sleep(10 * time.Millisecond)
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("after the first let go: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting agent did not get the state dir after the first let go")
	}
}

// A filesystem without file locks (some network mounts) cannot keep a
// second agent off the state dir: the agent refuses to start there, saying
// why, rather than run its start-up removals unguarded (review, helper 58).
func TestAStateDirWithoutFileLocksRefusesToStart(t *testing.T) {
	old := flock
	flock = func(int, int) error { return syscall.ENOLCK }
	t.Cleanup(func() { flock = old })
	_, err := lockStateDir(context.Background(), t.TempDir(), time.Second, zap.NewNop())
	if err == nil || !errors.Is(err, syscall.ENOLCK) {
		t.Fatalf("no file locks: %v, want a refusal to start that names ENOLCK", err)
	}
}
