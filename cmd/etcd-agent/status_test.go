package main

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/journal"
)

func TestStatusTableNamesTheLastRecovery(t *testing.T) {
	at := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	done := journal.Record{ID: "abc", Phase: journal.PhaseDone, Result: journal.ResultSucceeded, StartedAt: at, FinishedAt: at.Add(9 * time.Second),
		RejoinMode: "raft", SeedFallback: "snapshot-hash-mismatch", OldMemberID: 0xb4, NewMemberID: 0xdd}
	open := journal.Record{ID: "def", Phase: journal.PhaseLearnerAdded, StartedAt: at}
	for _, c := range []struct {
		name string
		rep  agent.Report
		want []string
	}{
		{"none", agent.Report{}, nil},
		// Times absolute and relative to now (docs/recovery.md).
		{"closed, fell back", agent.Report{LastRecovery: &done}, []string{"last recovery: abc succeeded",
			"2026-11-30T06:00:00Z to 2026-11-30T06:00:09Z, 4m51s ago (took 9s)", "raft mode (seed fell back: snapshot-hash-mismatch)", "member b4 -> dd"}},
		{"in progress", agent.Report{LastRecovery: &open}, []string{"last recovery: def IN PROGRESS, phase learner-added, started 2026-11-30T06:00:00Z, 5m ago"}},
		{"unreadable", agent.Report{JournalError: "unexpected end of JSON input"}, []string{"last recovery: journal unreadable: unexpected end of JSON input"}},
	} {
		var b strings.Builder
		printReport(&b, c.rep, at.Add(5*time.Minute))
		out := b.String()
		if c.want == nil && strings.Contains(out, "last recovery") {
			t.Errorf("%s: a last-recovery line without a journal:\n%s", c.name, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", c.name, w, out)
			}
		}
	}
}
