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
		{Name: "went-back", Source: FromDataDir, DataDir: "stale", DataDirVerified: true, Term: 3, Commit: 900, ReportedAt: now},
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
	// Not known to hold nothing: nothing said, a report too old, a held
	// data dir whose WAL could not be read. Any may be newer.
	if !slices.Equal(c.Unknown, []string{"silent", "old-report", "held-unread"}) || !strings.Contains(c.Lost, "silent") {
		t.Fatalf("unknown %v, lost %q", c.Unknown, c.Lost)
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

// Whatever shows a quorum somewhere stops the restore: a member's etcd with
// a leader, an agent whose member serves, an agent that sees a quorum.
func TestAnySignOfAQuorumMeansNoRestore(t *testing.T) {
	for _, sign := range []Member{
		{Name: "b", Source: FromEtcd, Commit: 12, Leader: 0xc},
		{Name: "b", DataDir: "ok", Serving: true, ReportedAt: now},
		{Name: "b", DataDir: "ok", QuorumSeen: true, ReportedAt: now},
	} {
		c := Choose([]Member{{Name: "a", Source: FromEtcd, Commit: 10}, sign}, false, now)
		if c.Survivor != nil || !strings.Contains(c.Refused, "b's") || !strings.Contains(c.Refused, "split") {
			t.Errorf("%+v: %+v", sign, c)
		}
	}
}

// etcd keeps max(the WAL's commit, the db's applied index) under
// --force-new-cluster: after a crash the db can be ahead of the WAL's
// commit, which is not fsynced on its own.
func TestTheRankIsTheHigherOfCommitAndApplied(t *testing.T) {
	c := Choose([]Member{
		{Name: "x", Source: FromDataDir, DataDir: "ok", Commit: 990, Applied: 990, ReportedAt: now},
		{Name: "y", Source: FromDataDir, DataDir: "ok", Commit: 985, Applied: 1000, ReportedAt: now},
	}, false, now)
	if c.Survivor.Name != "y" || !strings.Contains(c.Why, "1000") {
		t.Fatalf("%+v", c)
	}
}

// A member whose etcd serves from a data dir deleted under it is no
// survivor: stopped, its files are gone.
func TestARunningMemberWhoseDataDirIsGoneIsNoSurvivor(t *testing.T) {
	c := Choose([]Member{
		{Name: "wiped", Source: FromEtcd, Commit: 50, DataDir: "missing"},
		{Name: "ok", Source: FromDataDir, DataDir: "ok", Commit: 40, ReportedAt: now},
	}, false, now)
	if c.Survivor.Name != "ok" || !strings.Contains(c.Members[1].Problem, "snapshot") {
		t.Fatalf("%+v", c)
	}
}
