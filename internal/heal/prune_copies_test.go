package heal

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
)

// copiesNamed makes n dirs <root>/<prefix>-<stamp>, one per hour before t.
func copiesNamed(t *testing.T, root, prefix string, n int, before time.Time) []string {
	t.Helper()
	var out []string
	for i := n; i >= 1; i-- {
		at := before.Add(-time.Duration(i) * time.Hour).UTC()
		d := filepath.Join(root, prefix+"-"+at.Format("2006-01-02T15-04-05.000000000Z"))
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(d, at, at); err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// Review (issue 38): --quarantine-keep pruned only data dirs named after
// the data dir and snapshots. The copies of a dedicated WAL dir
// (wal-<member>-<name>-<stamp>, in the quarantine or beside the WAL dir on its own
// disk) and the member/ copies of a data dir kept in place (a volume's
// root, a symlink: <data dir>/etcd-agent-quarantine/member-<stamp>) piled
// up until the disk was full. They are pruned by the same rule, each kind
// keeping its newest.
func TestQuarantineKeepPrunesWALAndMemberCopiesToo(t *testing.T) {
	r := newRig(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	clock := t0
	r.h.now = func() time.Time { return clock }
	r.h.cfg.QuarantineKeep = 1
	wal := filepath.Join(r.dir, "wal-disk", "etcd-wal")
	r.h.cfg.WALDir = wal
	beside := filepath.Join(filepath.Dir(wal), localdisk.VolumeQuarantineDirName)
	walHere := copiesNamed(t, r.h.cfg.QuarantineDir, "wal-m1-etcd-wal", 2, t0)
	walBeside := copiesNamed(t, beside, "wal-m1-etcd-wal", 2, t0.Add(-10*time.Hour))
	// Review (session 26): pod members whose data dirs share a parent share
	// the quarantine; another member's WAL dir of the same basename must
	// keep its copies (before, its only one was pruned as ours).
	theirs := copiesNamed(t, r.h.cfg.QuarantineDir, "wal-m2-etcd-wal", 1, t0.Add(-20*time.Hour))
	members := copiesNamed(t, filepath.Join(r.h.cfg.DataDir, localdisk.VolumeQuarantineDirName), "member", 3, t0)
	other := copiesNamed(t, beside, "wal-another", 2, t0) // another WAL dir's: never
	all := slices.Concat(theirs, walHere, walBeside, members, other)
	for _, when := range []time.Duration{0, time.Minute + r.h.cfg.QuarantinePruneAfter} {
		clock = t0.Add(when)
		res := cluster3(memberstate.Healthy, 1, 2, 3)
		res.Observation.At = clock
		r.h.Housekeep(res)
	}
	want := slices.Concat(theirs, []string{walHere[1]}, []string{members[2]}, other)
	if got := present(all); !slices.Equal(got, want) {
		t.Fatalf("left %v,\nwant %v (the newest WAL copy and member copy, another WAL dir's copies)", got, want)
	}
}
