package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// TestFiveMembersOneLostOneWipedVerifiesWithoutTheDead: of 5 members, node5
// is lost for good (node and disk) and node2's data dir is wiped. node2's
// agent heals and verifies HashKV on the serving voters; the dead node5 is
// reported (journal message), not waited for until the recovery timeout
// (3m in the lab) with the Lease held.
func TestFiveMembersOneLostOneWipedVerifiesWithoutTheDead(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 5, Agents: true})
	before := idsByPeer(mustMembers(t, l))
	p2 := peerOf(t, l, "node2")
	ensureNotLeader(t, l, "node2", "node5")
	h := startHeal(t, l)
	h.fault()
	if err := h.chk.HardFault(func() error { return l.LoseNode("node5", true) }); err != nil {
		t.Fatal(err)
	}
	if err := l.WipeDataDir("node2"); err != nil {
		t.Fatal(err)
	}
	var j journal.Record
	eventually(t, 60*time.Second, "node2's agent closes its recovery while node5 is dead", func() error {
		var ok bool
		j, ok = loadJournal(t, l, "node2", "node2")
		switch {
		case !ok:
			return fmt.Errorf("no journal yet")
		case j.Active():
			return fmt.Errorf("recovery open in phase %s", j.Phase)
		case j.Result != journal.ResultSucceeded:
			return fmt.Errorf("recovery closed with %s (%s: %s)", j.Result, j.Reason, j.Message)
		}
		return nil
	})
	t.Logf("TTR %s (recovery %s): %s", j.FinishedAt.Sub(h.faultAt).Round(time.Millisecond),
		j.FinishedAt.Sub(j.StartedAt).Round(time.Millisecond), j.Message)
	logPhases(t, j)
	if !strings.Contains(j.Message, "node5") {
		t.Errorf("journal message %q does not report the dead node5", j.Message)
	}
	after := mustMembers(t, l)
	voters := 0
	for _, m := range after {
		if m.Learner {
			t.Fatalf("learner left behind: %+v", after)
		}
		voters++
	}
	if ids := idsByPeer(after); voters != 5 || ids[p2] == before[p2] || ids[p2] != uint64(j.NewMemberID) {
		t.Fatalf("members %+v: want 5 voters, node2 under its new ID %x (was %x)", after, uint64(j.NewMemberID), before[p2])
	}
	rep := h.finish(invariant.Options{Lost: []string{"node5"}})
	if rep.MaxLearners != 1 {
		t.Fatalf("max learners %d, want 1", rep.MaxLearners)
	}
}
