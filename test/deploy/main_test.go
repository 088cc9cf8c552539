// Package deploy tests what is shipped in deploy/: the kustomize base and
// overlay (rendered, checked against the agent's real flags and needs, and
// dry-run server-side against the lab's real kube-apiserver), the RBAC
// (an identity bound only to the shipped roles can do what the agent needs
// and nothing else), the alerts (promtool check/test rules), the runbooks
// and the Grafana dashboard.
//
// Tests that need the API server share one 1-node lab, started on first use;
// `go test ./test/deploy/ -run 'Alert|Render|Dashboard'` needs none.
package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"go.uber.org/zap"
)

var (
	repoRoot string
	binDir   string
	tmpRoot  string
	failed   bool

	agentOnce   sync.Once
	agentBinary string
	agentErr    error

	labOnce sync.Once
	theLab  *lab.Lab
	labErr  error
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))
	binDir = filepath.Join(repoRoot, "bin")
	// promtool is needed by the alert tests, which always run: fail loudly
	// rather than skip.
	if _, err := os.Stat(filepath.Join(binDir, "promtool")); err != nil {
		return 1, fmt.Errorf("%s missing: run `make tools` first (the alert tests need the real promtool)", filepath.Join(binDir, "promtool"))
	}
	var err error
	if tmpRoot, err = os.MkdirTemp("", "etcd-agent-deploy-"); err != nil {
		return 1, err
	}
	code := m.Run()
	if theLab != nil {
		if err := theLab.Down(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "deploy: lab down:", err)
			code = 1
		}
	}
	if code == 0 && !failed {
		os.RemoveAll(tmpRoot)
	} else {
		fmt.Fprintln(os.Stderr, "deploy: test folders kept for inspection in", tmpRoot)
	}
	return code, nil
}

// agent builds the etcd-agent binary once (fresh, never a stale bin/ copy).
func agent(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		agentBinary = filepath.Join(tmpRoot, "etcd-agent")
		build := exec.Command("go", "build", "-o", agentBinary, "./cmd/etcd-agent")
		build.Dir = repoRoot
		out, err := build.CombinedOutput()
		if err != nil {
			agentErr = fmt.Errorf("build etcd-agent: %v\n%s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentBinary
}

// sharedLab brings up one 1-node lab (etcd + kube-apiserver, no agents) on
// first use; TestMain stops it.
func sharedLab(t *testing.T) *lab.Lab {
	t.Helper()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			t.Fatalf("%s missing: run `make tools` first (these tests need the real binaries)", filepath.Join(binDir, b))
		}
	}
	bin := agent(t)
	labOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		theLab, labErr = lab.Up(ctx, lab.Options{Dir: filepath.Join(tmpRoot, "lab"), Nodes: 1,
			BinDir: binDir, AgentBinary: bin, Log: zap.NewNop()})
		if labErr != nil && theLab == nil {
			return
		}
	})
	if labErr != nil {
		failed = true
		t.Fatalf("lab up: %v", labErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			failed = true
			dumpAPIServerLog(t, theLab)
		}
	})
	return theLab
}

func dumpAPIServerLog(t *testing.T, l *lab.Lab) {
	if l == nil || l.Spec.APIServer == nil {
		return
	}
	b, err := os.ReadFile(l.Spec.APIServer.LogFile)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	t.Logf("==> %s <==\n%s", l.Spec.APIServer.LogFile, strings.Join(lines, "\n"))
}

// repoPath joins parts under the repository root.
func repoPath(parts ...string) string {
	return filepath.Join(append([]string{repoRoot}, parts...)...)
}
