package main

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/progress"
)

func TestStatusTableNamesTheLastRecovery(t *testing.T) {
	at := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	done := journal.Record{ID: "abc", Phase: journal.PhaseDone, Result: journal.ResultSucceeded, StartedAt: at, FinishedAt: at.Add(9 * time.Second),
		RejoinMode: "raft", SeedFallback: "snapshot-hash-mismatch", OldMemberID: 0xb4, NewMemberID: 0xdd,
		Steps: []string{"pre-change stream: 1.2 GiB in 7.5s (160 MiB/s)"}}
	open := journal.Record{ID: "def", Phase: journal.PhaseLearnerAdded, StartedAt: at}
	for _, c := range []struct {
		name string
		rep  agent.Report
		want []string
	}{
		{"none", agent.Report{}, nil},
		// Times absolute and relative to now (docs/recovery.md).
		{"closed, fell back", agent.Report{LastRecovery: &done}, []string{"last recovery: abc succeeded",
			"2026-11-30T06:00:00Z to 2026-11-30T06:00:09Z, 4m51s ago (took 9s)", "raft mode (seed fell back: snapshot-hash-mismatch)", "member b4 -> dd; pre-change stream: 1.2 GiB in 7.5s (160 MiB/s)"}},
		{"in progress", agent.Report{LastRecovery: &open}, []string{"last recovery: def IN PROGRESS, phase learner-added, started 2026-11-30T06:00:00Z, 5m ago"}},
		{"unreadable", agent.Report{JournalError: "unexpected end of JSON input"}, []string{"last recovery: journal unreadable: unexpected end of JSON input"}},
		// Issue 44: how far the long step of the recovery running now is.
		{"streaming", agent.Report{LastRecovery: &open, Progress: []progress.Estimate{{Step: "seed stream", Unit: progress.Bytes, Total: 1 << 30,
			Left: 640 << 20, Rate: 64 << 20, ETA: 10 * time.Second, StartedAt: at.Add(4 * time.Minute), At: at.Add(5 * time.Minute)}}},
			[]string{"last recovery: def IN PROGRESS", "\nprogress: seed stream: 384 MiB of 1.0 GiB (38%), 64 MiB/s, about 10s left"}},
	} {
		var b strings.Builder
		printReport(&b, c.rep, at.Add(5*time.Minute))
		out := b.String()
		if c.want == nil && strings.Contains(out, "last recovery") {
			t.Errorf("%s: a last-recovery line without a journal:\n%s", c.name, out)
		}
		for _, w := range c.want {
			if w = strings.ReplaceAll(w, `\n`, "\n"); !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", c.name, w, out)
			}
		}
	}
}
