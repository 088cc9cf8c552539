package survivor

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)

func names(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

func TestWithAQuorumNothingIsRestored(t *testing.T) {
	c := Choose([]Member{{Name: "a", Source: FromEtcd, Commit: 9}}, true, now)
	if c.Survivor != nil || !strings.Contains(c.Refused, "quorum") {
		t.Fatalf("with a quorum: %+v", c)
	}
}

// The member that keeps the most committed entries wins, wherever its
// evidence comes from: a stopped member read from its disk beats a running
// one that is behind. A member nothing reported on is named as unknown.
func TestTheSurvivorIsTheMemberThatKeepsTheMost(t *testing.T) {
	ms := []Member{
		{Name: "running-behind", Source: FromEtcd, Term: 3, Commit: 100},
		{Name: "stopped-newest", Source: FromDataDir, DataDir: "ok", Term: 3, Commit: 120, ReportedAt: now.Add(-5 * time.Second)},
		{Name: "wiped", DataDir: "missing", ReportedAt: now},
		{Name: "silent"},
		{Name: "old-report", Source: FromDataDir, DataDir: "ok", Term: 3, Commit: 500, ReportedAt: now.Add(-StaleAfter - time.Second)},
		{Name: "went-back", Source: FromDataDir, DataDir: "stale", Term: 3, Commit: 900, ReportedAt: now},
		{Name: "held-unread", DataDir: "in-use", ReportedAt: now},
		{Name: "learner", IsLearner: true, Source: FromEtcd, Term: 3, Commit: 990},
		{Name: "held-read", Source: FromDataDir, DataDir: "in-use", Term: 3, Commit: 110, ReportedAt: now},
	}
	c := Choose(ms, false, now)
	if c.Survivor == nil || c.Survivor.Name != "stopped-newest" {
		t.Fatalf("survivor %+v (refused %q), want stopped-newest", c.Survivor, c.Refused)
	}
	if got := names(c.Members); !slices.Equal(got[:3], []string{"stopped-newest", "held-read", "running-behind"}) {
		t.Fatalf("candidates first, best first: %v", got)
	}
	if !slices.Equal(c.Unknown, []string{"silent"}) || !strings.Contains(c.Lost, "silent") {
		t.Fatalf("unknown %v, lost %q: want silent named", c.Unknown, c.Lost)
	}
	for _, m := range c.Members {
		if want := m.Name == "stopped-newest" || m.Name == "running-behind" || m.Name == "held-read"; (m.Problem == "") != want {
			t.Errorf("%s: problem %q", m.Name, m.Problem)
		}
	}
	if !strings.Contains(c.Lost, "2 other candidate(s) are behind") {
		t.Fatalf("lost: %q", c.Lost)
	}
	if !strings.Contains(c.Why, "120") || !strings.Contains(c.Why, "held-read 110") {
		t.Fatalf("why: %q", c.Why)
	}
}

func TestTiesGoToTheHigherTermThenToTheRunningMember(t *testing.T) {
	c := Choose([]Member{
		{Name: "a", Source: FromDataDir, DataDir: "ok", Term: 4, Commit: 50, ReportedAt: now},
		{Name: "b", Source: FromDataDir, DataDir: "ok", Term: 5, Commit: 50, ReportedAt: now},
	}, false, now)
	if c.Survivor.Name != "b" {
		t.Fatalf("term tie-break: %s", c.Survivor.Name)
	}
	c = Choose([]Member{
		{Name: "a", Source: FromDataDir, DataDir: "ok", Term: 5, Commit: 50, ReportedAt: now},
		{Name: "b", Source: FromEtcd, Term: 5, Commit: 50},
	}, false, now)
	if c.Survivor.Name != "b" {
		t.Fatalf("running tie-break: %s", c.Survivor.Name)
	}
}

func TestNoIntactDataMeansASnapshot(t *testing.T) {
	c := Choose([]Member{{Name: "a", DataDir: "corrupt", ReportedAt: now}, {Name: "b"}}, false, now)
	if c.Survivor != nil || !strings.Contains(c.Refused, "snapshot") {
		t.Fatalf("%+v", c)
	}
	if _, err := Commands(c, nil, Etcdctl{}, Paths{}); err == nil {
		t.Fatal("commands without a survivor")
	}
}

// A member that has a leader is in a quorum, though this node sees none
// (a partition): a restore here would make a second cluster.
func TestAMemberWithALeaderMeansNoRestore(t *testing.T) {
	c := Choose([]Member{
		{Name: "a", Source: FromEtcd, Commit: 10},
		{Name: "b", Source: FromEtcd, Commit: 12, Leader: 0xc},
	}, false, now)
	if c.Survivor != nil || !strings.Contains(c.Refused, "b's etcd has a leader") {
		t.Fatalf("%+v", c)
	}
}
