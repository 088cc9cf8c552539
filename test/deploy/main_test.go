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
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
)

var (
	repoRoot string
	binDir   string

	agentOnce   sync.Once
	agentDir    string
	agentBinary string
	agentErr    error

	// shared is one 1-node lab (etcd + kube-apiserver, no agents), started
	// on first use: the alert and render tests need none.
	shared = labtest.NewShared("deploy", lab.Options{Nodes: 1})
)

func TestMain(m *testing.M) {
	var err error
	if repoRoot, err = labtest.RepoRoot(); err == nil {
		binDir = filepath.Join(repoRoot, "bin")
		// promtool is needed by the alert tests and kubectl (its kustomize)
		// by the render tests, which always run: fail loudly, not skip.
		err = labtest.CheckBinaries(binDir, "promtool", "kubectl")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
	shared.Main(m, func() { os.RemoveAll(agentDir) })
}

// agent builds the etcd-agent binary once (fresh, never a stale bin/ copy).
func agent(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		if agentDir, agentErr = os.MkdirTemp("", "etcd-agent-deploy-"); agentErr == nil {
			agentBinary, agentErr = labtest.BuildAgent(repoRoot, agentDir)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentBinary
}

// sharedLab is the package's lab; a failing test prints the API server's log.
func sharedLab(t *testing.T) *lab.Lab {
	t.Helper()
	l := shared.Lab(t)
	t.Cleanup(func() {
		if t.Failed() {
			dumpAPIServerLog(t, l)
		}
	})
	return l
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
