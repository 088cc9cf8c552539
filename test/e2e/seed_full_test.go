//go:build e2efull

package e2e

import (
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// TestSeedModeTenHealsInARow (make e2e-full): ten seed-mode heals of the
// same member in one lab, each checked with every invariant; any fallback
// to raft mode or any flake fails it.
func TestSeedModeTenHealsInARow(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--rejoin-mode=seed"}})
	for i := 1; i <= 10; i++ {
		h, j := seededWipeHeal(t, l)
		rep := h.finish(invariant.Options{})
		t.Logf("heal %d/10: seeded at %d, TTR %s, api writes %d/%d failed", i, j.SeedIndex,
			j.FinishedAt.Sub(j.StartedAt).Round(time.Millisecond), rep.Writes.APIFailed, rep.Writes.APIAttempted)
	}
}
