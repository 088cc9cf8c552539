package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// TestAPIStoppedLongerThanLeaseTTLMidHeal (issue 10 item 1): node2's heal
// has added its learner (held before the start) when the API server stops
// and stays down past the Lease's TTL (15 s) and the recovery timeout (3m).
// The attempt ends (its learner cannot be removed without the Lease: the
// journal stays open) and its renewer must end with it: before the fix it
// renewed the Lease once the API was back, and every poll then decided a
// step with the Lease held and executed nothing, for good. Required: once
// the API is back the open recovery resumes and the member heals.
func TestAPIStoppedLongerThanLeaseTTLMidHeal(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true,
		AgentArgs: []string{"--rejoin-mode=raft", "--test-hold-at=" + heal.HoldMemberStart}})
	h := wipeNode2(t, l)
	waitHold(t, l, "node2", heal.HoldMemberStart)
	apiStopping := time.Now()
	if err := l.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	release(t, l, "node2", heal.HoldMemberStart)
	// The attempt times out (3m after it began) with the API still down.
	eventually(t, 5*time.Minute, "node2's recovery attempt ends without the API", func() error {
		if len(logEntries(t, agentLog(t, l, "node2"), "recovery failed and its learner could not be removed; the journal stays open to resume")) == 0 &&
			len(logEntries(t, agentLog(t, l, "node2"), "recovery ended")) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	j, _ := loadJournal(t, l, "node2", "node2")
	t.Logf("attempt ended %s after the API stopped; journal phase %s result %q", time.Since(apiStopping).Round(time.Second), j.Phase, j.Result)
	if err := l.StartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	apiUp := time.Now()
	h.faultAt = apiUp // the heal counts from the API's return
	j = h.waitHealed("node2", "node2", 3, 3*time.Minute)
	t.Logf("healed %s after the API was back (recovery %s)", j.FinishedAt.Sub(apiUp).Round(time.Millisecond), j.ID)
	if v, err := metricValue(l, "node2", "etcd_agent_lease_held", nil); err != nil || v != 0 {
		t.Fatalf("node2 lease_held = %v (%v) after the heal, want 0", v, err)
	}
	h.finish(invariant.Options{AllowFailedWrites: true})
}
