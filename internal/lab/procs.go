package lab

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// handedOut remembers every port freePorts gave out in this process. A port
// is only reserved until its listener closes, and the process it is meant
// for binds it later (seconds later for a kube-apiserver): two labs brought
// up at once in one process (parallel e2e scenarios) could otherwise be
// handed the same just-closed port and fail with "address already in use".
var handedOut = struct {
	sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// freePorts reserves n free TCP ports on ip, holding all listeners open
// until every port is chosen so that no two come out equal, and never hands
// out a port it handed out before in this process.
func freePorts(ip string, n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	// Bounded: the kernel hands out each held-open port once, so a run of
	// already-given ports ends within the (about 28,000) ephemeral range.
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("find a free port on %s: %d tries gave only ports handed out before", ip, tries)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", ip, err)
		}
		ls = append(ls, l) // held open either way, so it is not offered again
		key := l.Addr().String()
		if handedOut.ports[key] {
			continue
		}
		handedOut.ports[key] = true
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// process is a lab process started by this one.
type process struct {
	PID  int
	done chan struct{} // closed when it has exited (and was reaped)
}

// exited reports whether p has exited. Use it rather than /proc right after a
// start: during execve /proc/PID/cmdline reads empty for a moment.
func exited(p *process) bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// startDetached starts a long-lived lab process in its own session so that it
// outlives the `lab up` command that started it; output goes to logPath.
func startDetached(argv []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	// Reap it when it exits while we are still around (tests); after the CLI
	// exits the process is reparented.
	p := &process{PID: cmd.Process.Pid, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// procAlive reports whether pid is a live (not zombie) process whose command
// line mentions marker. The marker (the lab dir) guards against signalling a
// stranger that reused a PID of ours.
func procAlive(pid int, marker string) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the ")" that closes the command name.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	if marker == "" {
		return true
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return strings.Contains(string(cmdline), marker)
}

// signalOurs sends sig to pid only if it is still a live process of ours
// (its command line mentions marker). The signal goes through a pidfd
// opened before the check, so a PID reused after the check cannot get it.
func signalOurs(pid int, marker string, sig syscall.Signal) error {
	if pid <= 0 {
		return fmt.Errorf("no process (pid %d)", pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("process %d is gone: %w", pid, err)
	}
	defer unix.Close(fd)
	if !procAlive(pid, marker) {
		return fmt.Errorf("process %d is gone or no longer ours (its command line does not mention %s)", pid, marker)
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		return fmt.Errorf("signal %s to process %d: %w", sig, pid, err)
	}
	return nil
}

// stopPID sends SIGTERM to pid (if it is still ours), waits up to grace for it
// to exit, then SIGKILLs it. It returns an error only if the process survives.
func stopPID(pid int, marker string, grace time.Duration) error {
	if !procAlive(pid, marker) {
		return nil
	}
	_ = signalOurs(pid, marker, syscall.SIGTERM)
	if waitGone(pid, marker, grace) {
		return nil
	}
	_ = signalOurs(pid, marker, syscall.SIGKILL)
	if waitGone(pid, marker, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("process %d survived SIGKILL", pid)
}

// waitGone polls until pid is no longer a live process of ours, up to d.
func waitGone(pid int, marker string, d time.Duration) bool {
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return !procAlive(pid, marker), nil
	}) == nil
}

// labProcesses lists live etcd, Kubernetes and etcd-agent processes whose
// command line mentions dir: what a `lab down` must leave none of.
func labProcesses(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		exe, err := os.Readlink("/proc/" + e.Name() + "/exe")
		if err != nil {
			continue
		}
		switch filepath.Base(strings.TrimSuffix(exe, " (deleted)")) {
		case "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd-agent", "weed":
			if procAlive(pid, dir+"/") {
				out = append(out, pid)
			}
		}
	}
	return out
}
