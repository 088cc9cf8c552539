package heal

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// quarantined makes n quarantined data dirs and n snapshots of member m1,
// one per hour before t, with their names' times as modification times.
func quarantined(t *testing.T, qdir string, n int, before time.Time) (dirs, snaps []string) {
	t.Helper()
	if err := os.MkdirAll(qdir, 0o700); err != nil {
		t.Fatal(err)
	}
	for i := n; i >= 1; i-- {
		at := before.Add(-time.Duration(i) * time.Hour).UTC()
		d := filepath.Join(qdir, "data-"+at.Format("2006-01-02T15-04-05.000000000Z"))
		s := filepath.Join(qdir, "snapshot-m1-"+at.Format(localdisk.SnapshotStampLayout)+".db")
		if err := os.MkdirAll(filepath.Join(d, "member", "snap"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s, []byte("snapshot"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{d, s} {
			if err := os.Chtimes(p, at, at); err != nil {
				t.Fatal(err)
			}
		}
		dirs, snaps = append(dirs, d), append(snaps, s)
	}
	return dirs, snaps
}

func present(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// --quarantine-keep is enforced: copies beyond the newest keep are pruned
// once the member has been healthy (tracker verdict, quorum held) since
// they were made and for QuarantinePruneAfter, never while it is not, and
// never while a recovery is open; each deletion is an Event and a metric.
func TestQuarantineKeepIsEnforcedOnceHealthySince(t *testing.T) {
	r := newRig(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	clock := t0
	r.h.now = func() time.Time { return clock }
	r.h.cfg.QuarantineKeep = 2
	qdir := filepath.Join(r.dir, "etcd-agent-quarantine")
	dirs, snaps := quarantined(t, qdir, 4, t0)
	all := append(slices.Clone(dirs), snaps...)
	other := filepath.Join(qdir, "snapshot-m1-2-"+t0.Add(-5*time.Hour).Format(localdisk.SnapshotStampLayout)+".db")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	at := func(state memberstate.State, when time.Time) {
		clock = when
		res := cluster3(state, 1, 2, 3)
		res.Observation.At = when
		r.h.Housekeep(res)
	}

	// Not healthy: nothing goes.
	at(memberstate.Down, t0)
	at(memberstate.Lost, t0.Add(time.Minute))
	if got := present(all); len(got) != 8 {
		t.Fatalf("pruned while the member was not healthy: left %v", got)
	}
	// Healthy, but not yet for QuarantinePruneAfter.
	at(memberstate.Healthy, t0.Add(2*time.Minute))
	at(memberstate.Healthy, t0.Add(2*time.Minute+r.h.cfg.QuarantinePruneAfter-time.Second))
	if got := present(all); len(got) != 8 {
		t.Fatalf("pruned before the member was healthy for %s: left %v", r.h.cfg.QuarantinePruneAfter, got)
	}
	// An open recovery: nothing goes.
	r.journalAt(t, "auto", journal.PhaseStopped, 0xa1, 0)
	at(memberstate.Healthy, t0.Add(3*time.Minute+r.h.cfg.QuarantinePruneAfter))
	if got := present(all); len(got) != 8 {
		t.Fatalf("pruned while a recovery is open: left %v", got)
	}
	j := r.journal(t)
	j.Result, j.FinishedAt = journal.ResultSucceeded, t0.Add(time.Minute)
	j.Advance(journal.PhaseDone, j.FinishedAt)
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	// Healthy long enough since after every copy: the two oldest of each
	// kind go, the newest two stay; another member's snapshot stays.
	at(memberstate.Healthy, t0.Add(4*time.Minute+r.h.cfg.QuarantinePruneAfter))
	want := []string{dirs[2], dirs[3], snaps[2], snaps[3], other}
	if got := present(append(slices.Clone(all), other)); !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	if n := r.rep.count(nodereport.ReasonQuarantinePruned); n != 4 {
		t.Fatalf("%d QuarantinePruned Events, want 4 (one per deletion)", n)
	}
	if n := testutil.ToFloat64(r.m.QuarantinePrunedTotal.WithLabelValues("m1")); n != 4 {
		t.Fatalf("quarantine_pruned_total = %v, want 4", n)
	}
}

// A copy made after the member was last seen unhealthy is never pruned,
// and neither is anything once the member is unhealthy again.
func TestQuarantineNeverPrunesACopyNewerThanTheLastUnhealthySighting(t *testing.T) {
	r := newRig(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	clock := t0
	r.h.now = func() time.Time { return clock }
	r.h.cfg.QuarantineKeep = 1
	qdir := filepath.Join(r.dir, "etcd-agent-quarantine")
	// Copies at t0-3h, -2h, -1h; the member healthy since t0-150m.
	dirs, _ := quarantined(t, qdir, 3, t0)
	at := func(state memberstate.State, when time.Time) {
		clock = when
		res := cluster3(state, 1, 2, 3)
		res.Observation.At = when
		r.h.Housekeep(res)
	}
	at(memberstate.Down, t0.Add(-151*time.Minute))
	at(memberstate.Healthy, t0.Add(-150*time.Minute))
	at(memberstate.Healthy, t0)
	// Only the -3h copy predates the healthy run; the -2h one does not
	// (and the -1h one is the newest, kept).
	if got := present(dirs); !slices.Equal(got, dirs[1:]) {
		t.Fatalf("left %v, want %v", got, dirs[1:])
	}
	at(memberstate.Degraded, t0.Add(time.Minute))
	at(memberstate.Healthy, t0.Add(2*time.Minute))
	at(memberstate.Healthy, t0.Add(3*time.Minute+r.h.cfg.QuarantinePruneAfter))
	// Healthy again since t0+2m, after the -2h copy: it may go now.
	if got := present(dirs); !slices.Equal(got, dirs[2:]) {
		t.Fatalf("left %v, want %v", got, dirs[2:])
	}
}
