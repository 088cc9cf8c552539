package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestManualRecover drives the manual trigger (Node annotations, docs/design.md §7)
// on one lab, with automatic healing off so that only requests act:
// (a) a rejoin of a healthy member is carried out (rule 2 allows it while
// quorum survives the stop); (b) a dry run only plans; (c) a value that is
// not understood is refused bad-request; (d) a rejoin that would lose quorum
// (node3 stopped) is refused would-lose-quorum. (b)-(d) change nothing.
func TestManualRecover(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--auto-heal=false"}})
	waitAgentState(t, l, "node2", "healthy", "ok", 30*time.Second)
	// node1 leads: neither (a) nor (d) stops the leader (see ensureNotLeader).
	ensureNotLeader(t, l, "node2", "node3")
	h := startHeal(t, l)
	kc := h.kc
	p2 := peerOf(t, l, "node2")

	// (a) rejoin a healthy member, as the runbooks ask it (a plan first).
	waitStopWatchConnected(t, l, "node2") // it sees the stop, and leaves it to etcd
	before := idsByPeer(mustMembers(t, l))
	h.fault()
	ask := loadProcedure(t, "ask-agent")
	ask.onNode(t, l, "node2", l.Spec.ClientURLs())
	ask.subst = []string{"NODE=cp-2", "NODE=node2"}
	ask.run(t, 3*time.Minute)
	lr, raw := waitLastRecovery(t, kc, "node2", "", 90*time.Second)
	if lr.Result != nodereport.ResultSucceeded || lr.Request != "rejoin" || lr.RejoinMode != "seed" || lr.SeedFallback != "" {
		t.Fatalf("(a) last-recovery %s: want a succeeded rejoin, seeded (the default rejoin mode)", raw)
	}
	j := h.waitHealed("node2", "node2", 3, 30*time.Second)
	if j.Request != "rejoin" {
		t.Fatalf("(a) journal request %q, want rejoin", j.Request)
	}
	afterA := idsByPeer(mustMembers(t, l))
	if afterA[p2] == before[p2] || afterA[p2] != uint64(j.NewMemberID) {
		t.Fatalf("(a) node2's member: before %x, after %x, journal new %x: want a new ID", before[p2], afterA[p2], uint64(j.NewMemberID))
	}
	// A healthy member's data dir is complete: it is all kept.
	assertQuarantine(t, l, "node2", j, "member/snap/db", "member/wal/*.wal")
	// Its etcd had a db to flush: the stop watch let its own stop run.
	if ended := stopWatchSays(t, l, "node2", "etcd ended without"); len(ended) > 0 {
		t.Fatalf("(a) the stop watch ended a healthy member's etcd (db on disk): %v", ended)
	}
	if seen := stopWatchSays(t, l, "node2", "etcd is stopping"); len(seen) == 0 || seen[0]["verdict"] != "data-on-disk" {
		t.Fatalf("(a) the stop watch's verdicts on the healthy member's stop: %v, want data-on-disk", seen)
	}
	t.Logf("(a) last-recovery: %s", raw)

	// (b) dry run: the plan, and nothing else.
	annotate(t, kc, "node2", map[string]any{nodereport.AnnotationRecover: "rejoin", nodereport.AnnotationRecoverDryRun: "true"})
	lr, raw = waitLastRecovery(t, kc, "node2", raw, 30*time.Second)
	if lr.Result != nodereport.ResultRefused || lr.Reason != "dry-run" {
		t.Fatalf("(b) last-recovery %s: want refused dry-run", raw)
	}
	if want := fmt.Sprintf("remove member %x", afterA[p2]); !strings.Contains(lr.Message, "would:") || !strings.Contains(lr.Message, want) {
		t.Fatalf("(b) dry-run message %q does not give the plan (%q)", lr.Message, want)
	}
	t.Logf("(b) last-recovery: %s", raw)
	assertUnchanged(t, l, "(b)", afterA, j)

	// (c) a request the agent does not understand.
	annotate(t, kc, "node2", map[string]any{nodereport.AnnotationRecover: "reboot", nodereport.AnnotationRecoverDryRun: nil})
	lr, raw = waitLastRecovery(t, kc, "node2", raw, 30*time.Second)
	if lr.Result != nodereport.ResultRefused || lr.Reason != "bad-request" || !strings.Contains(lr.Message, "reboot") {
		t.Fatalf("(c) last-recovery %s: want refused bad-request naming the value", raw)
	}
	t.Logf("(c) last-recovery: %s", raw)
	assertUnchanged(t, l, "(c)", afterA, j)

	// (d) node3 stopped: 2 of 3 healthy, stopping node2 would lose quorum.
	if err := l.StopMember("node3"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "node2 agent sees 2 healthy voters", func() error {
		v, err := metricValue(l, "node2", "etcd_agent_cluster_healthy_voting_members", nil)
		if err != nil {
			return err
		}
		if v != 2 {
			return fmt.Errorf("healthy voters %v", v)
		}
		return nil
	})
	annotate(t, kc, "node2", map[string]any{nodereport.AnnotationRecover: "rejoin"})
	lr, raw = waitLastRecovery(t, kc, "node2", raw, 30*time.Second)
	if lr.Result != nodereport.ResultRefused || lr.Reason != "would-lose-quorum" {
		t.Fatalf("(d) last-recovery %s: want refused would-lose-quorum", raw)
	}
	t.Logf("(d) last-recovery: %s", raw)
	assertUnchanged(t, l, "(d)", afterA, j)
	// node3's own agent did not heal it either: automatic healing is off.
	assertNoRecovery(t, l, "node3", "node3")
	if err := l.StartMember("node3"); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitHealthy(ctx, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	h.finish(invariantDefaults())
}

// assertUnchanged: a refused request left the membership and node2's
// journal as they were.
func assertUnchanged(t *testing.T, l *lab.Lab, step string, ids map[string]uint64, last journal.Record) {
	t.Helper()
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, ids) {
		t.Fatalf("%s membership changed: %v → %v", step, ids, now)
	}
	j, _ := loadJournal(t, l, "node2", "node2")
	if j.ID != last.ID || j.Phase != last.Phase || j.Result != last.Result {
		t.Fatalf("%s node2's journal changed: %s %s %s → %s %s %s", step, last.ID, last.Phase, last.Result, j.ID, j.Phase, j.Result)
	}
}

// TestManualRequestDuringAnAutomaticHealIsAnsweredByIt (issue 10 item 6):
// node2's data dir is wiped; its agent's automatic heal takes the Lease and
// is held there while an SRE asks for a rejoin of node2. Released, the heal
// succeeds and answers the request: the trigger is cleared, last-recovery
// is the heal's result, and the request is never executed on its own (no
// second stop of the just-rejoined member: its ID, the journal and the
// membership stay as the heal left them over the next polls).
func TestManualRequestDuringAnAutomaticHealIsAnsweredByIt(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, Failpoints: []string{heal.HoldAtFailpoint(heal.HoldLeaseAcquired)}})
	waitAgentState(t, l, "node2", "healthy", "ok", 30*time.Second)
	h := wipeNode2(t, l)
	waitHold(t, l, "node2", heal.HoldLeaseAcquired)
	annotate(t, h.kc, "node2", map[string]any{nodereport.AnnotationRecover: "rejoin"})
	release(t, l, "node2", heal.HoldLeaseAcquired)
	j := h.waitHealed("node2", "node2", 3, 3*time.Minute)
	if j.Request != "auto" {
		t.Fatalf("the heal's journal says request %q, want auto (the automatic heal, not the request)", j.Request)
	}
	lr, raw := waitLastRecovery(t, h.kc, "node2", "", 30*time.Second)
	if lr.Result != nodereport.ResultSucceeded || lr.Request != "auto" {
		t.Fatalf("last-recovery %s: want the automatic heal's success", raw)
	}
	eventually(t, 30*time.Second, "the trigger is cleared", func() error {
		n, err := h.kc.CoreV1().Nodes().Get(context.Background(), "node2", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if v, ok := n.Annotations[nodereport.AnnotationRecover]; ok {
			return fmt.Errorf("%s=%s still set", nodereport.AnnotationRecover, v)
		}
		return nil
	})
	// The member's state reaches the Node once per change (the status
	// annotation): healthy again after the heal.
	eventually(t, 30*time.Second, "node2's status annotation says healthy", func() error {
		n, err := h.kc.CoreV1().Nodes().Get(context.Background(), "node2", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if st := n.Annotations[nodereport.AnnotationStatus]; !strings.HasPrefix(st, "healthy (healthy): member node2, 3/3 voters healthy") {
			return fmt.Errorf("status %q", st)
		}
		return nil
	})
	after := idsByPeer(mustMembers(t, l))
	// Three more observations by node2's agent after the clear: every
	// chance to act on a request it still held.
	polls, err := observations(l, "node2")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "node2's agent observes 3 more times", func() error {
		n, err := observations(l, "node2")
		if err != nil {
			return err
		}
		if n < polls+3 {
			return fmt.Errorf("%v observations, want %v", n, polls+3)
		}
		return nil
	})
	if now, _ := loadJournal(t, l, "node2", "node2"); now.ID != j.ID || now.Active() {
		t.Fatalf("node2's journal %s (active %v) after the heal %s: the request was executed again", now.ID, now.Active(), j.ID)
	}
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, after) {
		t.Fatalf("membership changed after the heal answered the request: %v → %v", after, now)
	}
	started := 0
	for _, e := range logEntries(t, agentLog(t, l, "node2"), "recovery phase done") {
		if e["phase"] == string(journal.PhaseStarted) {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("%d recoveries started on node2, want 1", started)
	}
	h.finish(invariantDefaults())
}

// observations is how many observations node's agent has made.
func observations(l *lab.Lab, node string) (uint64, error) {
	m, err := l.AgentMetrics(context.Background(), node)
	if err != nil {
		return 0, err
	}
	var n uint64
	if fam, ok := m["etcd_agent_observation_duration_seconds"]; ok {
		for _, s := range fam.Metric {
			n += s.GetHistogram().GetSampleCount()
		}
	}
	return n, nil
}
