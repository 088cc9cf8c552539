package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pod renders a static-pod manifest whose init container appends "init" to
// marker and whose container appends "main" and then sleeps.
func pod(marker, tag string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: demo-%[2]s
spec:
  initContainers:
  - name: gate
    command: ["/bin/sh", "-c", "echo init >> %[1]s"]
  containers:
  - name: main
    command: ["/bin/sh", "-c", "echo main >> %[1]s; exec sleep 300"]
`, marker, tag)
}

func startSupervisor(t *testing.T) (dir string, state string) {
	t.Helper()
	dir = t.TempDir()
	state = filepath.Join(dir, "supervisor.json")
	s, err := New(Config{ManifestsDir: filepath.Join(dir, "manifests"), LogsDir: filepath.Join(dir, "logs"),
		StateFile: state, Resync: 200 * time.Millisecond, StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return dir, state
}

// waitMain polls the state file until container main runs with a PID other than notPID.
func waitMain(t *testing.T, stateFile string, notPID int) ContainerState {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		st, err := ReadState(stateFile)
		if err == nil {
			if c, ok := st.Container("demo.yaml", "main"); ok && c.State == "running" && c.PID != 0 && c.PID != notPID {
				return c
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("container main not running (with a pid other than %d) after 15s", notPID)
	return ContainerState{}
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !containsState(b, 'Z')
}

func containsState(stat []byte, s byte) bool {
	for i := len(stat) - 1; i > 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == s
		}
	}
	return false
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pid %d still alive", pid)
}

func TestRunsInitContainersBeforeContainersAndRestartsOnExit(t *testing.T) {
	dir, state := startSupervisor(t)
	marker := filepath.Join(dir, "marker")
	if err := os.WriteFile(filepath.Join(dir, "manifests", "demo.yaml"), []byte(pod(marker, "a")), 0o644); err != nil {
		t.Fatal(err)
	}
	c := waitMain(t, state, 0)
	b, _ := os.ReadFile(marker)
	if string(b) != "init\nmain\n" {
		t.Fatalf("init container must complete before the container starts; marker file:\n%s", b)
	}
	if err := syscall.Kill(c.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c2 := waitMain(t, state, c.PID)
	if c2.Restarts != 1 {
		t.Fatalf("restarts = %d, want 1", c2.Restarts)
	}
}

func TestStopsPodWhenManifestDisappearsAndRestartsItWhenItChanges(t *testing.T) {
	dir, state := startSupervisor(t)
	marker := filepath.Join(dir, "marker")
	path := filepath.Join(dir, "manifests", "demo.yaml")
	if err := os.WriteFile(path, []byte(pod(marker, "a")), 0o644); err != nil {
		t.Fatal(err)
	}
	first := waitMain(t, state, 0)
	// A changed manifest replaces the pod.
	if err := os.WriteFile(path, []byte(pod(marker, "b")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitDead(t, first.PID)
	second := waitMain(t, state, first.PID)
	// A manifest moved out of the dir (how a static pod is stopped) stops it.
	if err := os.Rename(path, filepath.Join(dir, "demo.yaml.stopped")); err != nil {
		t.Fatal(err)
	}
	waitDead(t, second.PID)
}

func TestIgnoresManifestsThatAreNotPods(t *testing.T) {
	dir, state := startSupervisor(t)
	if err := os.WriteFile(filepath.Join(dir, "manifests", "junk.yaml"), []byte("kind: Deployment\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "demo.yaml"), []byte(pod(filepath.Join(dir, "m"), "a")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitMain(t, state, 0)
	st, err := ReadState(state)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.Pods["junk.yaml"]; ok {
		t.Fatal("a manifest that is not a Pod was run")
	}
}

// Containers start with SIGHUP at its default, as a container runtime
// starts them, also when the lab runs under nohup (CI): an ignored SIGHUP
// would reach etcd through the gate's exec, and the gate's stop watch
// cannot end an etcd that ignores it.
func TestContainersStartWithSIGHUPAtItsDefault(t *testing.T) {
	signal.Ignore(syscall.SIGHUP) // as nohup leaves it
	t.Cleanup(func() { signal.Reset(syscall.SIGHUP) })
	dir, state := startSupervisor(t)
	if err := os.WriteFile(filepath.Join(dir, "manifests", "demo.yaml"), []byte(pod(filepath.Join(dir, "marker"), "a")), 0o644); err != nil {
		t.Fatal(err)
	}
	c := waitMain(t, state, 0)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hexMask, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hexMask), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if mask&(1<<(uint(syscall.SIGHUP)-1)) != 0 {
				t.Fatalf("the container ignores SIGHUP (SigIgn %s)", strings.TrimSpace(hexMask))
			}
			return
		}
	}
	t.Fatal("no SigIgn line")
}
