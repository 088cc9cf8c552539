package plan

import (
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// skeletonBase: node2's member serves as a voter of a three-member cluster;
// its data dir (a plain dir, WAL in member/wal) was removed whole.
func skeletonBase() SkeletonInput {
	return SkeletonInput{
		Obs: observation.Observation{LeaderID: 0xa1, Members: []observation.Member{
			{ID: 0xa1, Name: "m1", Serving: true}, {ID: 0xa2, Name: "m2", Serving: true}, {ID: 0xa3, Name: "m3"}},
			Local: observation.Local{Name: "m2", Match: observation.MatchOK, ID: 0xa2, AnsweringID: 0xa2, Serving: true,
				DataDirClass: observation.DataDirMissing}},
		Facts: SkeletonFacts{
			Paths: SkeletonPaths{DataDir: "/var/lib/etcd/data", MemberDir: "/var/lib/etcd/data/member", SnapDir: "/var/lib/etcd/data/member/snap",
				WALDir: "/var/lib/etcd/data/member/wal", Marker: "/var/lib/etcd/data/member/etcd-agent-skeleton"},
			DataDirParent: true,
		},
	}
}

// Issue 38: a wiped member that still serves died 30 s later on etcd's own
// purge, which turned a survivable double fault into majority loss. The
// agent puts back exactly the dirs that are gone, marked, and only for a
// serving voter it has matched, with no recovery of it open.
func TestDecideSkeletonRestoresOnlyWhatIsGoneOfAServingWipedVoter(t *testing.T) {
	all := SkeletonParts{DataDir: true, MemberDir: true, Marker: true, SnapDir: true, WALDir: true}
	for _, c := range []struct {
		name string
		mod  func(*SkeletonInput)
		want SkeletonParts
	}{
		{"the data dir removed whole", nil, all},
		{"its contents removed (rm -rf data/*; a volume's root)", func(in *SkeletonInput) {
			in.Facts.DataDir, in.Facts.DataDirMountRoot = true, true
		}, SkeletonParts{MemberDir: true, Marker: true, SnapDir: true, WALDir: true}},
		{"member/snap alone removed (the db with it)", func(in *SkeletonInput) {
			in.Facts.DataDir, in.Facts.MemberDir, in.Facts.WALDir = true, true, true
		}, SkeletonParts{Marker: true, SnapDir: true}},
		{"with --wal-dir: both removed", func(in *SkeletonInput) {
			in.Facts.WALDedicated, in.Facts.WALDirParent = true, true
		}, all},
		{"with --wal-dir: the data dir removed, the WAL dir intact", func(in *SkeletonInput) {
			in.Facts.WALDedicated, in.Facts.WALDir = true, true
		}, SkeletonParts{DataDir: true, MemberDir: true, Marker: true, SnapDir: true}},
		{"the marked skeleton lost its snap dir again", func(in *SkeletonInput) {
			in.Facts.DataDir, in.Facts.MemberDir, in.Facts.WALDir, in.Facts.Marked = true, true, true, true
			in.Obs.Local.DataDirClass = observation.DataDirCorrupt
		}, SkeletonParts{SnapDir: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := skeletonBase()
			if c.mod != nil {
				c.mod(&in)
			}
			d := DecideSkeleton(in)
			t.Logf("%s: %s", d.Reason, d.Detail)
			if !d.Restore || d.Reason != SkeletonRestore || d.Make != c.want {
				t.Fatalf("DecideSkeleton = %+v, want a restore of %+v", d, c.want)
			}
			if !strings.Contains(d.Detail, "purge") || !strings.Contains(d.Detail, "member a2") {
				t.Fatalf("detail %q does not say why (etcd's purge) and for which member", d.Detail)
			}
		})
	}
}

func TestDecideSkeletonNeverTouchesAMemberThatIsNotAServingWipedVoter(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*SkeletonInput)
		want SkeletonReason
		says string
	}{
		{"a recovery of it is open (it may be stopping it)", func(in *SkeletonInput) {
			in.Journal = record.Record{ID: "r1", Phase: record.PhaseStarted}
		}, SkeletonRecoveryOpen, "phase started"},
		{"a recovery has quarantined its data dir", func(in *SkeletonInput) {
			in.Journal = record.Record{ID: "r1", Phase: record.PhaseSnapshotted, QuarantinePath: "/q/data"}
			in.Obs.Local.Serving = false
		}, SkeletonRecoveryOpen, "r1"},
		{"its journal cannot be read", func(in *SkeletonInput) { in.JournalErr = "unexpected end of JSON input" }, SkeletonJournalUnread, "JSON"},
		{"it does not serve (nothing runs from the wiped files)", func(in *SkeletonInput) { in.Obs.Local.Serving = false }, SkeletonNotServing, "does not serve"},
		{"its identity is not proven", func(in *SkeletonInput) {
			in.Obs.Local.Match, in.Obs.Local.ID, in.Obs.Local.MatchDetail = observation.MatchAmbiguous, 0, "member a9 answers at our client URL"
		}, SkeletonIdentity, "a9"},
		{"not found in the member list", func(in *SkeletonInput) { in.Obs.Local.Match, in.Obs.Local.ID = observation.MatchNotFound, 0 }, SkeletonIdentity, "not proven"},
		{"a learner (it holds no vote to keep)", func(in *SkeletonInput) { in.Obs.Local.IsLearner = true }, SkeletonLearner, "learner"},
		{"its db is in place (healthy)", func(in *SkeletonInput) {
			in.Facts.DataDir, in.Facts.MemberDir, in.Facts.SnapDir, in.Facts.DB, in.Facts.WALDir = true, true, true, true, true
			in.Obs.Local.DataDirClass = observation.DataDirInUse
		}, SkeletonNotWiped, "db"},
		{"its db is in place, the WAL dir gone (a WAL-only wipe, or a --wal-dir read wrong)", func(in *SkeletonInput) {
			in.Facts.DataDir, in.Facts.MemberDir, in.Facts.SnapDir, in.Facts.DB, in.Facts.WALDedicated, in.Facts.WALDirParent = true, true, true, true, true, true
			in.Obs.Local.DataDirClass = observation.DataDirInUse
		}, SkeletonNotWiped, "db"},
		{"a file in place of the data dir", func(in *SkeletonInput) { in.Facts.DataDirNotDir = true }, SkeletonNotADirectory, "not a directory"},
		{"the dirs could not be looked at", func(in *SkeletonInput) { in.Facts.Err = "stat: permission denied" }, SkeletonLookFailed, "permission denied"},
		{"the data dir was the root of etcd's volume (kubeadm's hostPath at --data-dir) and is gone", func(in *SkeletonInput) {
			in.Facts.DataDirMountRoot = true
		}, SkeletonMountRootGone, "container"},
		{"the data dir's parent is gone too", func(in *SkeletonInput) { in.Facts.DataDirParent = false }, SkeletonParentGone, "/var/lib/etcd"},
		{"the dedicated WAL dir was a mount root and is gone", func(in *SkeletonInput) {
			in.Facts.WALDedicated, in.Facts.WALDirParent, in.Facts.WALDirMountRoot = true, true, true
		}, SkeletonMountRootGone, "WAL"},
		{"the dedicated WAL dir's parent is gone too", func(in *SkeletonInput) { in.Facts.WALDedicated = true }, SkeletonParentGone, "WAL"},
		{"the marked skeleton is whole", func(in *SkeletonInput) {
			in.Facts.DataDir, in.Facts.MemberDir, in.Facts.SnapDir, in.Facts.WALDir, in.Facts.Marked = true, true, true, true, true
		}, SkeletonInPlace, "marked"},
		{"every dir is there, unmarked, no db", func(in *SkeletonInput) {
			in.Facts.DataDir, in.Facts.MemberDir, in.Facts.SnapDir, in.Facts.WALDir = true, true, true, true
		}, SkeletonNothingMissing, "purge"},
		{"dry run", func(in *SkeletonInput) { in.DryRun = true }, SkeletonDryRun, "would make"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := skeletonBase()
			c.mod(&in)
			d := DecideSkeleton(in)
			t.Logf("%s: %s", d.Reason, d.Detail)
			if d.Restore || d.Make != (SkeletonParts{}) || d.Reason != c.want || !strings.Contains(d.Detail, c.says) {
				t.Fatalf("DecideSkeleton = %+v, want no restore, reason %s, a detail saying %q", d, c.want, c.says)
			}
		})
	}
}

// Every combination of what the dirs can look like: a restore only ever
// makes parts that are gone, never leaves an unmarked skeleton, and only
// for a serving voter with no record open.
func TestDecideSkeletonMakesOnlyMissingPartsAndAlwaysMarks(t *testing.T) {
	const n = 13
	for mask := 0; mask < 1<<n; mask++ {
		bit := func(i int) bool { return mask&(1<<i) != 0 }
		in := skeletonBase()
		f := &in.Facts
		f.DataDir, f.DataDirNotDir, f.DataDirParent, f.MemberDir, f.SnapDir, f.DB = bit(0), bit(1), bit(2), bit(3), bit(4), bit(5)
		f.WALDedicated, f.WALDir, f.WALDirParent, f.Marked, f.DataDirMountRoot, f.WALDirMountRoot = bit(6), bit(7), bit(8), bit(9), bit(10), bit(11)
		in.Obs.Local.Serving = bit(12)
		d := DecideSkeleton(in)
		if !d.Restore {
			if d.Make != (SkeletonParts{}) || d.Reason == "" || d.Detail == "" {
				t.Fatalf("%+v: no restore must say why and make nothing: %+v", *f, d)
			}
			continue
		}
		m := d.Make
		switch {
		case !in.Obs.Local.Serving, f.DB, f.DataDirNotDir:
			t.Fatalf("%+v serving=%v: restored %+v", *f, in.Obs.Local.Serving, d)
		case m.DataDir && f.DataDir, m.MemberDir && f.MemberDir, m.SnapDir && f.SnapDir, m.WALDir && f.WALDir, m.Marker && f.Marked:
			t.Fatalf("%+v: makes a part that is there: %+v", *f, m)
		case !m.Marker && !f.Marked:
			t.Fatalf("%+v: an unmarked skeleton: %+v", *f, m)
		case m.DataDir && (f.DataDirMountRoot || !f.DataDirParent), m.WALDir && f.WALDedicated && (f.WALDirMountRoot || !f.WALDirParent):
			t.Fatalf("%+v: makes a dir etcd cannot see or whose parent is gone: %+v", *f, m)
		case !m.DataDir && !f.DataDir, !m.MemberDir && !f.MemberDir, !m.SnapDir && !f.SnapDir, !m.WALDir && !f.WALDir:
			t.Fatalf("%+v: leaves a dir the purge lists missing: %+v", *f, m)
		}
	}
}
