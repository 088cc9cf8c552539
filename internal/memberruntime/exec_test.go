package memberruntime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

func TestExecRunsTheUserCommandsAndHandsStartTheInitialCluster(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "running")
	envFile := filepath.Join(dir, "env")
	stop := "rm -f " + marker
	start := "touch " + marker + ` && printf '%s\n%s\n' "$ETCD_INITIAL_CLUSTER" "$ETCD_INITIAL_CLUSTER_STATE" > ` + envFile
	rt := NewExec(stop, start, []string{"http://" + closedAddr(t)}, filepath.Join(dir, "etcd"), zaptest.NewLogger(t))

	const ic = "a=http://127.0.0.1:2380,b=http://127.0.0.2:2380"
	for i := range 2 { // idempotent
		if err := rt.Start(ctxWithTimeout(t, 5*time.Second), ic); err != nil {
			t.Fatalf("Start #%d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("start command did not run: %v", err)
	}
	env, _ := os.ReadFile(envFile)
	if want := ic + "\nexisting\n"; string(env) != want {
		t.Fatalf("start command saw env %q, want %q", env, want)
	}
	for i := range 2 {
		if err := rt.Stop(ctxWithTimeout(t, 10*time.Second)); err != nil {
			t.Fatalf("Stop #%d: %v", i+1, err)
		}
	}
	mustNotExist(t, marker)
	mustStopped(t, rt, true)
	if !strings.Contains(rt.Describe(), stop) {
		t.Errorf("Describe() = %q, want it to name the stop command", rt.Describe())
	}
}

func TestExecCommandFailureReportsItsOutput(t *testing.T) {
	rt := NewExec("echo 'Failed to stop etcd.service: Unit etcd.service not loaded.' >&2; exit 5", "true",
		[]string{"http://" + closedAddr(t)}, "", zaptest.NewLogger(t))
	err := rt.Stop(ctxWithTimeout(t, 5*time.Second))
	if err == nil {
		t.Fatal("Stop: want an error from a failing command")
	}
	for _, want := range []string{"exit status 5", "Unit etcd.service not loaded"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestExecCommandIsKilledWhenTheContextEnds(t *testing.T) {
	// The sleep is a grandchild of the shell: the whole group must die.
	rt := NewExec("sleep 30 & wait", "true", []string{"http://" + closedAddr(t)}, "", zaptest.NewLogger(t))
	begin := time.Now()
	err := rt.Stop(ctxWithTimeout(t, 300*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("Stop: got %v, want a deadline error", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("Stop returned after %s; the hung command was not killed", took)
	}
}

func TestExecWithoutACommandFails(t *testing.T) {
	rt := NewExec("", "", []string{"http://" + closedAddr(t)}, "", zaptest.NewLogger(t))
	if err := rt.Stop(ctxWithTimeout(t, time.Second)); err == nil {
		t.Error("Stop without a command: want an error")
	}
	if err := rt.Start(ctxWithTimeout(t, time.Second), "a=http://127.0.0.1:2380"); err == nil {
		t.Error("Start without a command: want an error")
	}
}
