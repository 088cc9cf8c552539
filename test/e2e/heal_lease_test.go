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
	apiStart := time.Now()
	h.faultAt = apiStart // the heal counts from the API's return
	if err := l.StartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	apiUp := time.Now()
	j = h.waitHealed("node2", "node2", 3, 3*time.Minute)
	if !j.StartedAt.Before(apiStopping) {
		t.Fatalf("healed by a recovery started %s, not the one open since before the API stopped", j.StartedAt)
	}
	t.Logf("healed %s after the API was ready (recovery %s resumed)", j.FinishedAt.Sub(apiUp).Round(time.Millisecond), j.ID)
	if v, err := metricValue(l, "node2", "etcd_agent_lease_held", nil); err != nil || v != 0 {
		t.Fatalf("node2 lease_held = %v (%v) after the heal, want 0", v, err)
	}
	h.finish(invariant.Options{AllowFailedWrites: true})
}

// TestAgentStoppedMidHealResumesWithoutFailure (issue 10 item 6): node2's
// agent is stopped (SIGTERM, as a DaemonSet rolling update does) while its
// heal holds the Lease. Shutdown is not failure: before the fix the
// attempt closed as failed (a failure counted, backoff, a RecoveryFailed
// Event) and the next agent began a new one. Required: the journal stays
// open and the restarted agent resumes that same recovery to success.
func TestAgentStoppedMidHealResumesWithoutFailure(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true,
		AgentArgs: []string{"--rejoin-mode=raft", "--test-hold-at=" + heal.HoldLeaseAcquired}})
	h := wipeNode2(t, l)
	waitHold(t, l, "node2", heal.HoldLeaseAcquired)
	open, _ := loadJournal(t, l, "node2", "node2")
	if !open.Active() {
		t.Fatalf("node2's journal is not open while its agent holds at %s: %+v", heal.HoldLeaseAcquired, open)
	}
	if err := l.RestartAgent(context.Background(), "node2"); err != nil {
		t.Fatal(err)
	}
	if j, _ := loadJournal(t, l, "node2", "node2"); j.ID != open.ID || !j.Active() || j.Failures != 0 {
		t.Fatalf("after the agent's shutdown: journal %s phase %s result %q (%s), failures %d; want %s still open, no failure",
			j.ID, j.Phase, j.Result, j.Message, j.Failures, open.ID)
	}
	release(t, l, "node2", heal.HoldLeaseAcquired)
	j := h.waitHealed("node2", "node2", 3, 90*time.Second)
	if j.ID != open.ID || j.Failures != 0 {
		t.Fatalf("healed by recovery %s with %d failures; want the resumed %s, no failure", j.ID, j.Failures, open.ID)
	}
	if v, err := metricValue(l, "node2", "etcd_agent_recoveries_total", map[string]string{"result": "failed"}); err != nil || v != 0 {
		t.Fatalf("node2 recoveries_total{result=failed} = %v (%v), want 0", v, err)
	}
	h.finish(invariant.Options{})
}
