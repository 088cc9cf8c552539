// Package realetcd runs the real etcd binaries of bin/ as one-member
// clusters for the tests of packages that read etcd's files (localdisk,
// extract): the formats are proven on what etcd itself writes, on every
// minor the agent supports (docs/testing.md, "Real parts, not mocks").
// It imports nothing of the lab, so any package's tests may use it.
package realetcd

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 15 * time.Second
	pollInterval = 20 * time.Millisecond
)

// RepoRoot walks up from the working directory (a package dir under test)
// to the directory holding the module's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/etcd-agent/etcd-agent\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no etcd-agent go.mod above the working directory")
		}
		dir = parent
	}
}

// Binary locates bin/<file> of the repo; a missing one fails the test
// (never a skip: these tests need the real binaries).
func Binary(t testing.TB, file string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "bin", file)
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		t.Fatalf("real etcd binary not found at %s (%v): run `make tools`", p, err)
	}
	return p
}

// Version is one etcd minor the tests run: its row name, its etcd binary
// and etcdutl in bin/, and the prefix its --version must print.
type Version struct{ Row, Etcd, Etcdutl, Prefix string }

// Versions are the minors whose files the agent reads (3.5 clusters are
// still common: Kubernetes up to 1.33, OpenShift up to 4.19).
var Versions = []Version{
	{Row: "etcd3.6", Etcd: "etcd", Etcdutl: "etcdutl", Prefix: "3.6."},
	{Row: "etcd3.5", Etcd: "etcd-3.5", Etcdutl: "etcdutl-3.5", Prefix: "3.5."},
}

// OnVersions runs f once per version, a subtest each, with the etcd
// binary's path; a binary of another minor than its row fails.
func OnVersions(t *testing.T, f func(t *testing.T, v Version, bin string)) {
	for _, v := range Versions {
		t.Run(v.Row, func(t *testing.T) {
			bin := Binary(t, v.Etcd)
			out, err := exec.Command(bin, "--version").Output()
			if err != nil || !strings.Contains(string(out), "etcd Version: "+v.Prefix) {
				t.Fatalf("%s --version: %q (%v), want etcd %s*", bin, out, err, v.Prefix)
			}
			f(t, v, bin)
		})
	}
}

// FreePort is a TCP port on 127.0.0.1 nobody listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Process is a running one-member etcd.
type Process struct {
	DataDir  string
	Endpoint string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd.Wait returns
	stopOnce sync.Once
}

// Start starts a one-member cluster of etcd bin whose data dir is dataDir
// and waits until it serves. It snapshots every 25 entries, so the files
// read have a real .snap. Stopped at the test's cleanup unless stopped
// before.
func Start(t testing.TB, bin, dataDir, name string) *Process {
	t.Helper()
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	logPath := dataDir + ".log"
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	cmd := exec.Command(bin,
		"--name", name,
		"--data-dir", dataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", name+"="+peerURL,
		"--initial-cluster-state", "new",
		// A unique token makes every test cluster get its own cluster ID.
		"--initial-cluster-token", fmt.Sprintf("%s-%d", name, time.Now().UnixNano()),
		"--snapshot-count", "25",
		"--log-level", "warn",
	)
	cmd.Env = withoutEtcdEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	p := &Process{DataDir: dataDir, Endpoint: clientURL, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.Stop(t) })

	if err := p.waitReady(); err != nil {
		p.Stop(t)
		t.Fatalf("etcd did not become ready: %v\n%s", err, p.LogTail())
	}
	return p
}

func (p *Process) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	cli := p.Client()
	defer cli.Close()
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("etcd exited: %v", p.cmd.ProcessState)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, lastErr = cli.Status(ctx, p.Endpoint)
		cancel()
		if lastErr == nil {
			return nil
		}
		time.Sleep(pollInterval)
	}
	return fmt.Errorf("not ready after %s: %v", startTimeout, lastErr)
}

// Client is a client of the member; the caller closes it.
func (p *Process) Client() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{p.Endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		// New only fails on bad config, never on an unreachable endpoint.
		panic(err)
	}
	return cli
}

// Stop sends SIGTERM to the member's PID and waits (bounded) for it to
// exit, escalating to SIGKILL. Safe to call more than once.
func (p *Process) Stop(t testing.TB) {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			return
		case <-time.After(stopTimeout):
		}
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(stopTimeout):
		}
		t.Errorf("etcd pid %d did not exit within %s of SIGTERM\n%s", p.cmd.Process.Pid, stopTimeout, p.LogTail())
	})
}

// Exited is closed once the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// LogTail is the end of the member's log, for a failure's message.
func (p *Process) LogTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// withoutEtcdEnv drops ETCD_* variables: etcd reads them as flags.
func withoutEtcdEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ETCD_") {
			out = append(out, kv)
		}
	}
	return out
}
