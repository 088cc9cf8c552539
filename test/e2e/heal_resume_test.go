package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// TestAgentKilledAfterRemoveAndAfterLearnerAddResumes: the agent is SIGKILLed
// (test hook) right after its backup streamed, right after MemberRemove and
// again right after MemberAddAsLearner, each time before its journal
// records the step: the worst moments to die. Restarted by its supervisor,
// it resumes from the cluster's actual membership: the old ID is gone (no
// second remove), the learner with its peer URL exists (adopted, no second
// add, no phantom). The backup the first kill left untaken is removed at
// the restart: one backup stays, the journaled one. The hook is on every
// agent, but only node2's heals.
func TestAgentKilledAfterRemoveAndAfterLearnerAddResumes(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, Failpoints: []string{heal.CrashBeforeFailpoint(journal.PhaseSnapshotted, journal.PhaseRemoved, journal.PhaseLearnerAdded)}})
	before := idsByPeer(mustMembers(t, l))
	h := wipeNode2(t, l)
	j := h.waitHealed("node2", "node2", 3, 120*time.Second)

	logPath := agentLog(t, l, "node2")
	crashes := logEntries(t, logPath, "crash injected")
	var phases []string
	for _, c := range crashes {
		phases = append(phases, c["phase"].(string))
	}
	if strings.Join(phases, ",") != "snapshotted,removed,learner-added" {
		t.Fatalf("crashes injected in phases %v, want exactly [snapshotted removed learner-added]", phases)
	}
	backups, _ := filepath.Glob(filepath.Join(filepath.Dir(j.SnapshotPath), "snapshot-node2-*.db"))
	if len(backups) != 1 || backups[0] != j.SnapshotPath {
		t.Fatalf("backups in the quarantine %v, want only the journaled %s", backups, j.SnapshotPath)
	}
	if removed := logEntries(t, logPath, "removed a backup a killed agent streamed and never took"); len(removed) != 1 {
		t.Fatalf("%d untaken backups removed, want 1 (the one streamed before the first kill)", len(removed))
	}
	if adopted := logEntries(t, logPath, "adopting the learner"); len(adopted) != 1 {
		t.Fatalf("%d 'adopting the learner' log lines, want 1 (the restarted agent reuses the learner it added)", len(adopted))
	}
	if adds := logEntries(t, logPath, "learner added"); len(adds) != 1 {
		t.Fatalf("%d MemberAddAsLearner calls logged, want 1", len(adds))
	}
	if resumed := logEntries(t, logPath, "recovery resumed"); len(resumed) < 3 {
		t.Fatalf("recovery resumed %d times, want 3 (once after each crash)", len(resumed))
	}
	ms := mustMembers(t, l)
	after := idsByPeer(ms)
	p2 := peerOf(t, l, "node2")
	if len(ms) != 3 || after[p2] == before[p2] || uint64(j.NewMemberID) != after[p2] {
		t.Fatalf("members %+v: want 3 (no phantom), node2's under the new ID %x", ms, uint64(j.NewMemberID))
	}
	rep := h.finish(invariantDefaults())
	if rep.MaxLearners != 1 {
		t.Fatalf("the membership watch saw %d learners at once, want 1", rep.MaxLearners)
	}
	for _, m := range rep.Memberships {
		if n := strings.Count(m, "/learner"); n > 1 {
			t.Fatalf("two learners: %s", m)
		}
	}
	assertQuarantine(t, l, "node2", j)
}
