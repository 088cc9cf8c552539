package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMemberBackBeforeTheRecheckIsLeftAlone: rule 6's re-check after the
// Lease is real. node2's etcd is hung (SIGSTOP, its data kept) until the
// agent finds it lost and takes the Lease; the heal is held there
// (heal.HoldAtFailpoint(heal.HoldLeaseAcquired)) while node2 is resumed and serves. (Not
// its manifest moved away: a member whose manifest is gone is not healed,
// manifest-missing.)
// Released, the agent re-observes, sees the member healthy and closes the
// recovery as refused/not-needed: no stop, no quarantine, the same member
// ID, no failure counted, no RecoveryFailed event, the Lease released.
func TestMemberBackBeforeTheRecheckIsLeftAlone(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, Failpoints: []string{heal.HoldAtFailpoint(heal.HoldLeaseAcquired)}})
	waitAgentState(t, l, "node2", "healthy", "ok", 30*time.Second)
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2")
	h := startHealVia(t, l, nodeOf(t, l, "node1").ClientURL, nodeOf(t, l, "node3").ClientURL)
	h.fault()
	if err := l.Pause("node2"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Resume("node2") }) // a failed test never leaves it hung for the lab's Down
	waitHold(t, l, "node2", heal.HoldLeaseAcquired)
	held := time.Now()
	if j, ok := loadJournal(t, l, "node2", "node2"); !ok || !j.Active() || j.Phase != journal.PhaseStarted {
		t.Fatalf("held after the Lease: journal %+v (exists %v), want open in phase started", j, ok)
	}
	leaseHolder(t, h, "node2/node2")

	if err := l.Resume("node2"); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("node2 hung, lost, held at the Lease, serving again %s after the hold began", time.Since(held).Round(time.Millisecond))
	release(t, l, "node2", heal.HoldLeaseAcquired)
	assertLeftAlone(t, l, h, before)
	if err := l.WaitHealthy(context.Background(), 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The kube-apiserver's etcd client waits out the requests it balanced
	// onto the hung member (a client's failover, as in
	// TestHungMemberStopIsBoundedLoggedAndRetried): API writes may fail;
	// etcd's, the linearizability and HashKV checks still hold.
	h.finish(invariant.Options{AllowFailedWrites: true})
}

// TestDataDirBackBeforeTheRecheckIsLeftAlone: node2's etcd is stopped, its
// data dir moved away, and started again, held by its start gate: lost at
// once (missing, not serving; the grace is an hour so that nothing else
// explains it). The heal is held at the Lease while the data dir is put
// back; released, its data dir is usable and it is no longer lost (within
// its grace, or serving once its gate let it start): it is not stopped,
// quarantined or rejoined. It serves under its old ID.
func TestDataDirBackBeforeTheRecheckIsLeftAlone(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true,
		AgentArgs: []string{"--grace-period=1h"}, Failpoints: []string{heal.HoldAtFailpoint(heal.HoldLeaseAcquired)}})
	waitAgentState(t, l, "node2", "healthy", "ok", 30*time.Second)
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2")
	h := startHeal(t, l)
	h.fault()
	if err := l.StopMember("node2"); err != nil {
		t.Fatal(err)
	}
	dataDir := nodeOf(t, l, "node2").DataDir
	if err := os.Rename(dataDir, dataDir+".away"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartMember("node2"); err != nil { // its manifest back: a member without one is not healed
		t.Fatal(err)
	}
	waitHold(t, l, "node2", heal.HoldLeaseAcquired)
	leaseHolder(t, h, "node2/node2")
	if err := os.Rename(dataDir+".away", dataDir); err != nil {
		t.Fatal(err)
	}
	release(t, l, "node2", heal.HoldLeaseAcquired)
	assertLeftAlone(t, l, h, before)
	if err := l.StartMember("node2"); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
		t.Fatalf("membership changed: before %v, now %v", before, now)
	}
	h.finish(invariantDefaults())
}

// assertLeftAlone waits until node2's agent closes its recovery and checks
// that the re-check left the member alone: refused/not-needed, no stop, no
// quarantine, the same member IDs, no failure, the Lease free, no
// RecoveryFailed event.
func assertLeftAlone(t *testing.T, l *lab.Lab, h *healRun, before map[string]uint64) {
	t.Helper()
	var j journal.Record
	eventually(t, 60*time.Second, "node2's agent closes the recovery", func() error {
		var ok bool
		if j, ok = loadJournal(t, l, "node2", "node2"); !ok || j.Active() {
			return fmt.Errorf("recovery still open in phase %s", j.Phase)
		}
		return nil
	})
	logPhases(t, j)
	if j.Result != journal.ResultRefused || j.Reason != string(plan.ReasonNotNeeded) {
		t.Fatalf("recovery closed %s/%s (%s), want %s/%s", j.Result, j.Reason, j.Message, journal.ResultRefused, plan.ReasonNotNeeded)
	}
	t.Logf("closed: %s", j.Message)
	if j.Failures != 0 || !j.StopAttemptedAt.IsZero() || j.QuarantinePath != "" {
		t.Fatalf("journal: failures %d, stop attempted %s, quarantine %q: want none", j.Failures, j.StopAttemptedAt, j.QuarantinePath)
	}
	if _, stopped := j.PhaseTimes[journal.PhaseStopped]; stopped {
		t.Fatal("journal records a stop")
	}
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
		t.Fatalf("membership changed: before %v, now %v", before, now)
	}
	qdir := filepath.Join(nodeOf(t, l, "node2").DiskDir, "etcd-agent-quarantine")
	if es, err := os.ReadDir(qdir); err == nil && len(es) > 0 || err != nil && !os.IsNotExist(err) {
		t.Fatalf("quarantine %s: %d entries (%v), want none", qdir, len(es), err)
	}
	leaseHolder(t, h, "")
	evs, err := h.kc.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=node2,reason=" + nodereport.ReasonRecoveryFailed})
	if err != nil || len(evs.Items) > 0 {
		t.Fatalf("RecoveryFailed events for node2: %d (%v), want none", len(evs.Items), err)
	}
	if v, err := metricValue(l, "node2", "etcd_agent_recoveries_total", map[string]string{"result": journal.ResultFailed}); err == nil && v != 0 {
		t.Fatalf("recoveries_total{result=failed} = %v, want 0", v)
	}
}

// leaseHolder waits until the recovery Lease is held by want ("" for
// nobody): the journal is closed just before the Lease is released.
func leaseHolder(t *testing.T, h *healRun, want string) {
	t.Helper()
	eventually(t, 15*time.Second, fmt.Sprintf("recovery Lease held by %q", want), func() error {
		ls, err := h.kc.CoordinationV1().Leases(lab.AgentNamespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		got := ""
		for _, le := range ls.Items {
			if le.Spec.HolderIdentity != nil && *le.Spec.HolderIdentity != "" {
				got = *le.Spec.HolderIdentity
			}
		}
		if got != want {
			return fmt.Errorf("held by %q", got)
		}
		return nil
	})
}
