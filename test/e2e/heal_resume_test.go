package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// TestAgentKilledAfterRemoveAndAfterLearnerAddResumes: the agent is SIGKILLed
// (test hook) right after MemberRemove and again right after
// MemberAddAsLearner, each time before its journal records the step: the
// worst moments to die. Restarted by its supervisor, it resumes from the
// cluster's actual membership: the old ID is gone (no second remove), the
// learner with its peer URL exists (adopted, no second add, no phantom).
// The hook is on every agent, but only node2's heals.
func TestAgentKilledAfterRemoveAndAfterLearnerAddResumes(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--test-crash-before-phase=removed,learner-added"}})
	before := idsByPeer(mustMembers(t, l))
	h := wipeNode2(t, l)
	j := h.waitHealed("node2", "node2", 3, 120*time.Second)

	logPath := agentLog(t, l, "node2")
	crashes := logEntries(t, logPath, "crash injected")
	var phases []string
	for _, c := range crashes {
		phases = append(phases, c["phase"].(string))
	}
	if strings.Join(phases, ",") != "removed,learner-added" {
		t.Fatalf("crashes injected in phases %v, want exactly [removed learner-added]", phases)
	}
	if adopted := logEntries(t, logPath, "adopting the learner"); len(adopted) != 1 {
		t.Fatalf("%d 'adopting the learner' log lines, want 1 (the restarted agent reuses the learner it added)", len(adopted))
	}
	if adds := logEntries(t, logPath, "learner added"); len(adds) != 1 {
		t.Fatalf("%d MemberAddAsLearner calls logged, want 1", len(adds))
	}
	if resumed := logEntries(t, logPath, "recovery resumed"); len(resumed) < 2 {
		t.Fatalf("recovery resumed %d times, want 2 (once after each crash)", len(resumed))
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
