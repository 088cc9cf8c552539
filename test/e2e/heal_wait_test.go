package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// TestHungMemberStopIsBoundedLoggedAndRetried (issue 10 item 8): node2's
// etcd hangs (SIGSTOP): it stops serving, its listeners still accept
// connections and it holds its db lock. Lost after the grace period, the
// agent parks its manifest; the lab kubelet gives the hung process its
// 10 s stop timeout before SIGKILL. The agent's wait for etcd to go has its
// own deadline (--stop-timeout=4s): it says that it waits and on what,
// fails the step at the deadline, keeps observing and exporting meanwhile,
// retries on a fresh observation, and heals once the process is gone.
// (The heal begins ~30 s after the SIGSTOP, not at "lost" (~4 s): the
// kube-apiserver's own etcd client is stuck on the hung member until its
// keepalive gives up, and meanwhile the agent is refused api-unavailable.)
func TestHungMemberStopIsBoundedLoggedAndRetried(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--stop-timeout=4s"}})
	waitAgentState(t, l, "node2", "healthy", "ok", 30*time.Second)
	ensureNotLeader(t, l, "node2")
	// The checker's client stays off node2: a hung member accepts
	// connections and never answers, and a client balanced onto it waits
	// out every request (a client's failover, not a quorum loss).
	h := startHealVia(t, l, nodeOf(t, l, "node1").ClientURL, nodeOf(t, l, "node3").ClientURL)
	h.fault()
	if err := l.Pause("node2"); err != nil {
		t.Fatal(err)
	}
	stopStep := map[string]string{"action": "stop-member"}
	var polls uint64
	eventually(t, 90*time.Second, "node2's agent exports its stop step", func() error {
		v, err := metricValue(l, "node2", "etcd_agent_recovery_step_started_timestamp_seconds", stopStep)
		if err != nil {
			return err
		}
		if v <= 0 {
			return fmt.Errorf("step started at %v", v)
		}
		polls, err = observations(l, "node2")
		return err
	})
	eventually(t, 30*time.Second, "node2's agent keeps observing while the stop waits", func() error {
		n, err := observations(l, "node2")
		if err != nil {
			return err
		}
		if _, err := metricValue(l, "node2", "etcd_agent_recovery_step_started_timestamp_seconds", stopStep); err != nil {
			t.Fatalf("the stop step ended before the agent observed again: %v", err)
		}
		if n < polls+2 {
			return fmt.Errorf("%d observations since the step began, want 2", n-polls)
		}
		return nil
	})
	j := h.waitHealed("node2", "node2", 3, 3*time.Minute)
	log := agentLog(t, l, "node2")
	if n := len(logEntries(t, log, "waiting for etcd to stop")); n < 2 {
		t.Fatalf("%d 'waiting for etcd to stop' lines, want one per attempt (at least 2)", n)
	}
	still := logEntries(t, log, "still waiting for etcd to stop")
	if len(still) == 0 || !strings.Contains(fmt.Sprint(still[0]["detail"]), "accepts connections") {
		t.Fatalf("'still waiting for etcd to stop' lines %v: want at least one naming what still answers", still)
	}
	failed := 0
	for _, e := range logEntries(t, log, "recovery step failed") {
		if strings.Contains(fmt.Sprint(e["error"]), "etcd did not stop within 4s") {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("no stop step failed at its own deadline (4s) although the hung process outlived it")
	}
	t.Logf("stop step failed %d time(s) at its 4s deadline, then went on; journal %s phase %s", failed, j.ID, j.Phase)
	for _, e := range logEntries(t, log, "member state changed") {
		if e["to"] == "lost" {
			t.Logf("node2 lost %s after the SIGSTOP", entryTime(t, e).Sub(h.faultAt).Round(time.Millisecond))
			break
		}
	}
	// A hung member keeps the connections clients have to it open without
	// answering: kube-apiserver's requests pinned to it time out until gRPC
	// keepalive gives up on it. That is the fault's doing, before and apart
	// from the heal; quorum, membership and data invariants are still
	// checked.
	h.finish(invariant.Options{AllowFailedWrites: true})
}
