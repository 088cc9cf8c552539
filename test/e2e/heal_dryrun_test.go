package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
)

// TestDryRunRestartMidHealChangesNothing: node2's heal is held at
// member-start (old member removed, learner added, data dir prepared); its
// agent is restarted with --dry-run, then the hold is released. The dry-run
// agent reports the open recovery (reason dry-run, its phase) on every poll
// and changes nothing: no Lease taken to resume, the learner neither started
// nor promoted, the journal left open in its phase.
func TestDryRunRestartMidHealChangesNothing(t *testing.T) {
	l, h := wipeHeldAt(t, etcd36, "member-start")
	held := sortedMembers(mustMembers(t, l))
	if err := l.RestartAgent(context.Background(), "node2", "--dry-run"); err != nil {
		t.Fatal(err)
	}
	release(t, l, "node2", "member-start")
	releasedAt := time.Now()
	eventually(t, 60*time.Second, "node2's dry-run agent reports the open recovery on 5 polls", func() error {
		if now := sortedMembers(mustMembers(t, l)); !slices.Equal(held, now) {
			t.Fatalf("membership changed under --dry-run:\n  held %v\n  now  %v", held, now)
		}
		n := 0
		for _, e := range logEntries(t, agentLog(t, l, "node2"), "recovery refused") {
			if e["reason"] == "dry-run" && strings.Contains(fmt.Sprint(e["detail"]), "phase prepared") && entryTime(t, e).After(releasedAt) {
				n++
			}
		}
		if n < 5 {
			return fmt.Errorf("%d dry-run reports since the release", n)
		}
		return nil
	})
	if after := sortedMembers(mustMembers(t, l)); !slices.Equal(held, after) {
		t.Fatalf("membership changed under --dry-run:\n  held  %v\n  after %v", held, after)
	}
	j, _ := loadJournal(t, l, "node2", "node2")
	if !j.Active() || j.Phase != journal.PhasePrepared {
		t.Fatalf("journal %s in phase %s (result %q), want open in phase prepared", j.ID, j.Phase, j.Result)
	}
	if es := logEntries(t, agentLog(t, l, "node2"), "recovery resumed"); len(es) > 0 && entryTime(t, es[len(es)-1]).After(releasedAt) {
		t.Fatalf("the dry-run agent resumed the recovery (took the Lease): %v", es[len(es)-1])
	}
	h.finish(invariantDefaults())
}

func sortedMembers(ms []member) []member {
	slices.SortFunc(ms, func(a, b member) int { return strings.Compare(a.Peer, b.Peer) })
	return ms
}
