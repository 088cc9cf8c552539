package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStrandedLearnerRolledBackThenWipedMemberHealed (issue 10 item 5):
// node3's agent heals node3 and has added its learner (held before the
// start) when node3 is lost for good, agent and all. Then node2's data dir
// is wiped (and its etcd killed). Before the fix node2 was refused learner-present for good.
// Required: once the dead owner's Lease has expired and the learner made no
// progress for --learner-stall-timeout (10 s here), node2's agent (the next
// Lease holder) rolls the learner back (journaled, an Event), then heals
// node2. Five nodes: with three, node3's old member is removed before its
// add, and the two voters left cannot spare node2.
func TestStrandedLearnerRolledBackThenWipedMemberHealed(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 5, Agents: true,
		AgentArgs: []string{"--rejoin-mode=raft", "--learner-stall-timeout=10s"}, Failpoints: []string{heal.HoldAtFailpoint(heal.HoldMemberStart)}})
	for _, n := range []string{"node1", "node2", "node4", "node5"} {
		release(t, l, n, heal.HoldMemberStart) // only node3's heal holds
	}
	ensureNotLeader(t, l, "node2", "node3")
	h := startHeal(t, l)
	if err := l.WipeDataDir("node3"); err != nil {
		t.Fatal(err)
	}
	waitHold(t, l, "node3", heal.HoldMemberStart)
	owner, _ := loadJournal(t, l, "node3", "node3")
	learnerID := uint64(owner.NewMemberID)
	if learnerID == 0 {
		t.Fatalf("node3's journal names no learner: %+v", owner)
	}
	lostAt := time.Now()
	if err := h.chk.HardFault(func() error { return l.LoseNode("node3", false) }); err != nil {
		t.Fatal(err)
	}
	// node2's data dir is wiped and its etcd killed at once: left running
	// on a wiped dir, etcd kills itself when its WAL purge (every 30 s)
	// finds the dir gone, at a moment no checker can excuse, and here the
	// wait for the owner's Lease to expire is long enough for that to come.
	h.fault()
	if err := h.chk.HardFault(func() error {
		if err := l.WipeDataDir("node2"); err != nil {
			return err
		}
		_, err := l.KillMember("node2")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// node2's journal holds the rollback record first, then its rejoin.
	eventually(t, 2*time.Minute, "node2's agent begins its rejoin after rolling the learner back", func() error {
		j, ok := loadJournal(t, l, "node2", "node2")
		switch {
		case !ok:
			return fmt.Errorf("no journal yet")
		case j.Kind != "" || j.StartedAt.Before(h.faultAt):
			return fmt.Errorf("journal of kind %q, phase %s, result %q (%s: %s)", j.Kind, j.Phase, j.Result, j.Reason, j.Message)
		}
		return nil
	})
	j := h.waitHealed("node2", "node2", 4, 2*time.Minute)

	// The learner was rolled back by node2's agent, not before the dead
	// owner's Lease expired (TTL 15 s, renewed every few seconds).
	var rolledAt time.Time
	for _, e := range logEntries(t, agentLog(t, l, "node2"), "stranded learner rolled back") {
		if e["learner"] == fmt.Sprintf("%x", learnerID) && e["reason"] == "learner-rolled-back" {
			rolledAt = entryTime(t, e)
		}
	}
	if rolledAt.IsZero() {
		t.Fatalf("node2's agent logged no rollback of learner %x", learnerID)
	}
	if waited := rolledAt.Sub(lostAt); waited < 10*time.Second {
		t.Fatalf("learner %x rolled back %s after its owner was lost: before its Lease could expire", learnerID, waited)
	}
	if !j.StartedAt.After(rolledAt) {
		t.Fatalf("node2's heal began %s, before the rollback %s", j.StartedAt, rolledAt)
	}
	t.Logf("learner %x rolled back %s after node3 was lost; node2 healed %s after the rollback",
		learnerID, rolledAt.Sub(lostAt).Round(time.Millisecond), j.FinishedAt.Sub(rolledAt).Round(time.Millisecond))
	eventually(t, 10*time.Second, "a RecoveryLearnerRolledBack Event on node2", func() error {
		evs, err := h.kc.CoreV1().Events("default").List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.name=node2,reason=" + nodereport.ReasonLearnerRolledBack})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, fmt.Sprintf("%x", learnerID)) {
				return nil
			}
		}
		return fmt.Errorf("%d %s Events, none naming learner %x", len(evs.Items), nodereport.ReasonLearnerRolledBack, learnerID)
	})
	if v, err := metricValue(l, "node2", "etcd_agent_learner_rollbacks_total", nil); err != nil || v != 1 {
		t.Fatalf("node2 learner_rollbacks_total = %v (%v), want 1", v, err)
	}
	for _, m := range mustMembers(t, l) {
		if m.Learner || m.ID == learnerID {
			t.Fatalf("member list after the heal still has %+v (stranded learner %x)", m, learnerID)
		}
	}
	rep := h.finish(invariant.Options{Lost: []string{"node3"}})
	if rep.MaxLearners != 1 {
		t.Fatalf("max learners %d, want 1", rep.MaxLearners)
	}
}
