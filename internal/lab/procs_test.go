package lab

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// A PID the lab recorded may belong to a stranger by the time a fault
// signals it: signalOurs must refuse one whose command line is not ours,
// and one that is gone.
func TestSignalOursOnlySignalsOurProcess(t *testing.T) {
	dir := t.TempDir()
	// The dir, as the shell's $0, is our marker; the ": " keeps the shell
	// from exec-ing sleep in its place.
	cmd := exec.Command("sh", "-c", "sleep 300; :", dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so cleanup stops the sleep too
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL); _ = cmd.Wait() })
	// Until the child has exec'd the shell, its command line is still the
	// test binary's: wait for our marker (CI raced this under load).
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return procAlive(pid, dir), nil }); err != nil {
		t.Fatalf("the shell never showed its marker in /proc/%d/cmdline: %v", pid, err)
	}

	if err := signalOurs(pid, "/not/our/lab", syscall.SIGKILL); err == nil {
		t.Fatal("signalled a process whose command line does not mention the marker")
	}
	if !procAlive(pid, dir) {
		t.Fatal("the refused signal reached the process")
	}
	if err := signalOurs(pid, dir, syscall.SIGKILL); err != nil {
		t.Fatalf("our own process: %v", err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("want the process killed by SIGKILL, got %v", err)
	}
	if err := signalOurs(pid, dir, syscall.SIGKILL); err == nil {
		t.Fatal("a reaped PID was signalled without an error")
	}
}

// Labs brought up at once in one process (parallel e2e scenarios) must not
// be handed the same port: a port is only held until freePorts returns, and
// the kernel offers a closed port again. 1000 ports drawn from the ~28,000
// ephemeral ones at random would repeat one almost surely (about 18 pairs
// expected); freePorts must give none twice.
func TestFreePortsNeverHandsOutAPortTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		ports, err := freePorts("127.0.0.1", 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice (after %d ports)", p, len(seen))
			}
			seen[p] = true
		}
	}
}
