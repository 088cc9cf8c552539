package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
)

// TestRecoverCommandPlansThenRejoins: `etcd-agent recover --dry-run` from a
// shell on the node reports the plan and changes nothing; `etcd-agent
// recover` rejoins the (healthy) member through its agent, same rules.
func TestRecoverCommandPlansThenRejoins(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true})
	ctx := context.Background()
	ensureNotLeader(t, l, "node2")
	before := idsByPeer(mustMembers(t, l))
	peer := peerOf(t, l, "node2")
	run := func(args ...string) (nodereport.LastRecovery, int) {
		t.Helper()
		cmd := exec.Command(agentBinary, append([]string{"recover", "--node-name=node2", "--kubeconfig=" + l.Spec.APIServer.Kubeconfig,
			"--timeout=3m", "--log-format=json"}, args...)...)
		out, err := cmd.Output()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var lr nodereport.LastRecovery
		if err := json.Unmarshal(out, &lr); err != nil {
			t.Fatalf("recover printed no last-recovery JSON (exit %d): %v\n%s", code, err, out)
		}
		return lr, code
	}
	lr, code := run("--dry-run")
	if code != 0 || lr.Result != nodereport.ResultRefused || lr.Reason != "dry-run" || !strings.Contains(lr.Message, "remove member") {
		t.Fatalf("dry run: exit %d, %+v", code, lr)
	}
	if after := idsByPeer(mustMembers(t, l)); after[peer] != before[peer] {
		t.Fatalf("a dry run changed the member: %v -> %v", before, after)
	}
	lr, code = run()
	if code != 0 || lr.Result != nodereport.ResultSucceeded {
		t.Fatalf("recover: exit %d, %+v", code, lr)
	}
	if err := l.WaitHealthy(ctx, 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if after := idsByPeer(mustMembers(t, l)); after[peer] == before[peer] {
		t.Fatalf("node2 kept its member ID %x: not rejoined", before[peer])
	}
}
