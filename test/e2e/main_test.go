// Package e2e runs scenarios against the real lab: etcd and kube-apiserver
// processes from bin/ (built by `make tools`) and the etcd-agent binary built
// fresh by TestMain. Scenarios that do not break the cluster share one lab.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	"go.uber.org/zap"
)

var (
	repoRoot    string
	binDir      string
	agentBinary string

	sharedOnce sync.Once
	sharedLab  *lab.Lab
	sharedErr  error
	tmpRoot    string
	failed     atomic.Bool // a scenario failed: keep tmpRoot for inspection

	// parallelTests are the tests newLab has made parallel (t.Parallel
	// panics when called twice, and a test may bring up two labs).
	parallelTests sync.Map
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if repoRoot, err = labtest.RepoRoot(); err != nil {
		return 1, err
	}
	binDir = filepath.Join(repoRoot, "bin")
	if err := labtest.CheckBinaries(binDir, "etcd", "etcd-3.7", "etcd-3.5", "etcdutl-3.5", "etcdctl", "kube-apiserver"); err != nil {
		return 1, err
	}
	if tmpRoot, err = os.MkdirTemp("", "etcd-agent-e2e-"); err != nil {
		return 1, err
	}
	if err := labtest.CheckFreeDisk(tmpRoot, 4<<30); err != nil {
		os.RemoveAll(tmpRoot)
		return 1, err
	}
	if agentBinary, err = labtest.BuildAgent(repoRoot, tmpRoot); err != nil {
		return 1, err
	}
	code := m.Run()
	if sharedLab != nil {
		if err := sharedLab.Down(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: shared lab down:", err)
			code = 1
		}
	}
	if code == 0 && !failed.Load() {
		os.RemoveAll(tmpRoot)
	} else {
		fmt.Fprintln(os.Stderr, "e2e: lab folders kept for inspection in", tmpRoot)
	}
	return code, nil
}

// newLab brings up a lab of its own for a scenario that breaks it; it is
// stopped when the test ends. A scenario with a lab of its own shares
// nothing with the others, so it runs in parallel with them (go test
// -parallel, 2 by default on this 2-core machine: a scenario waits on etcd
// and the agents far more than it computes); newSerialLab is for one that
// must run alone.
func newLab(t *testing.T, o lab.Options) *lab.Lab {
	t.Helper()
	if _, already := parallelTests.LoadOrStore(t, true); !already {
		t.Parallel()
	}
	return upLab(t, o)
}

// newSerialLab is newLab for a scenario that must not run in parallel with
// others (it sets the test process's environment).
func newSerialLab(t *testing.T, o lab.Options) *lab.Lab {
	t.Helper()
	return upLab(t, o)
}

func upLab(t *testing.T, o lab.Options) *lab.Lab {
	t.Helper()
	o.Dir = filepath.Join(tmpRoot, strings.ReplaceAll(t.Name(), "/", "_"))
	o.BinDir, o.AgentBinary = binDir, agentBinary
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, o)
	if l != nil {
		t.Cleanup(func() {
			if t.Failed() {
				failed.Store(true)
				dumpLogs(t, l)
			}
			if err := l.Down(context.Background()); err != nil {
				t.Errorf("lab down: %v", err)
			}
			// A passing scenario's folder goes now, not at the end: its
			// etcd WAL segments are preallocated 64 MiB each, and kept for
			// the whole run they add up to ~9 GiB of disk.
			if !t.Failed() {
				if err := os.RemoveAll(o.Dir); err != nil {
					t.Logf("lab folder %s not removed: %v", o.Dir, err)
				}
			}
		})
	}
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	return l
}

// shared returns the lab that scenarios which leave it healthy share.
func shared(t *testing.T) *lab.Lab {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		sharedLab, sharedErr = lab.Up(ctx, lab.Options{Dir: filepath.Join(tmpRoot, "shared"), Nodes: 3,
			BinDir: binDir, AgentBinary: agentBinary, Log: zap.NewNop()})
	})
	if sharedErr != nil {
		t.Fatalf("shared lab up: %v", sharedErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			failed.Store(true)
			dumpLogs(t, sharedLab)
		}
	})
	return sharedLab
}

// dumpLogs prints the tail of every lab log to the test output, so that a
// failure in CI can be read without the lab folder.
func dumpLogs(t *testing.T, l *lab.Lab) {
	files, _ := filepath.Glob(filepath.Join(l.Spec.Dir, "node*", "logs", "*.log"))
	if l.Spec.APIServer != nil {
		files = append(files, l.Spec.APIServer.LogFile)
	}
	if m := l.Spec.Management; m != nil {
		for _, p := range []*lab.Process{m.ControllerManager, m.Scheduler} {
			if p != nil {
				files = append(files, p.LogFile)
			}
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		t.Logf("==> %s <==\n%s", f, strings.Join(lines, "\n"))
	}
}

// eventually polls cond until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	labtest.Eventually(t, d, what, cond)
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
