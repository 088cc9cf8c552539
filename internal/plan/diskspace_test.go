package plan

import (
	"strings"
	"testing"
)

// An attempt writes more than the backup snapshot: with the data dir and
// the quarantine on one filesystem, the raft snapshot the leader sends (or
// the seed stream) lands there too, with a WAL segment. Room for the backup
// alone is not room for the attempt.
func TestDiskFullCountsEverythingAnAttemptWrites(t *testing.T) {
	const db = 1 << 30
	backupOnly := uint64(db)*11/10 + 64*mib // what was counted before
	want(t, Decide(cluster(3, 2, dbSize(db), free(backupOnly))), Refuse, ReasonDiskFull)
	want(t, Decide(cluster(3, 2, dbSize(db), free(3*db/2))), Refuse, ReasonDiskFull)
	want(t, Decide(cluster(3, 2, dbSize(db), free(3*db))), Begin, ReasonNone)
}

// What each rejoin mode writes, on one filesystem or two.
func TestAttemptBytesNeededPerModeAndFilesystem(t *testing.T) {
	const db = 1 << 30
	cp := uint64(db) * 11 / 10 // one copy of the db, +10%
	wal, slack := uint64(64*mib), uint64(64*mib)
	for _, tc := range []struct {
		name         string
		db           int64
		seed, sameFS bool
		want         AttemptBytes
	}{
		// backup + raft snapshot + WAL, one filesystem
		{"raft, one filesystem", db, false, true, AttemptBytes{Quarantine: 2*cp + wal + slack}},
		// backup + seed stream (moved into the data dir, not copied) + WAL
		{"seed, one filesystem", db, true, true, AttemptBytes{Quarantine: 2*cp + wal + slack}},
		// the backup in the quarantine; the raft snapshot and WAL on the data dir's disk
		{"raft, data dir on its own disk", db, false, false, AttemptBytes{Quarantine: cp + slack, DataDir: cp + wal + slack}},
		// backup and seed stream in the quarantine; the stream copied to the data dir's disk
		{"seed, data dir on its own disk", db, true, false, AttemptBytes{Quarantine: 2*cp + slack, DataDir: cp + wal + slack}},
		{"empty db, one filesystem", 0, true, true, AttemptBytes{Quarantine: wal + slack}},
		{"unknown (negative) db size counts as 0", -1, false, false, AttemptBytes{Quarantine: slack, DataDir: wal + slack}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AttemptBytesNeeded(tc.db, tc.seed, tc.sameFS); got != tc.want {
				t.Fatalf("AttemptBytesNeeded(%d, seed %v, sameFS %v) = %+v, want %+v", tc.db, tc.seed, tc.sameFS, got, tc.want)
			}
		})
	}
}

// A data dir on its own filesystem: each filesystem must hold its part.
func TestDiskFullOnEitherFilesystem(t *testing.T) {
	const db = 1 << 30
	otherFS := func(q, d uint64) opt {
		return func(s *spec) { s.in.DataDirOtherFS, s.in.FreeBytes, s.in.DataDirFreeBytes = true, q, d }
	}
	seed := func(s *spec) { s.cfg.RejoinSeed = true }
	need := AttemptBytesNeeded(db, false, false)
	want(t, Decide(cluster(3, 2, dbSize(db), otherFS(need.Quarantine, need.DataDir))), Begin, ReasonNone)
	want(t, Decide(cluster(3, 2, dbSize(db), otherFS(need.Quarantine-1, need.DataDir))), Refuse, ReasonDiskFull)
	want(t, Decide(cluster(3, 2, dbSize(db), otherFS(need.Quarantine, need.DataDir-1))), Refuse, ReasonDiskFull)
	// Seed mode also streams into the quarantine.
	want(t, Decide(cluster(3, 2, dbSize(db), otherFS(need.Quarantine, need.DataDir), seed)), Refuse, ReasonDiskFull)
	seedNeed := AttemptBytesNeeded(db, true, false)
	want(t, Decide(cluster(3, 2, dbSize(db), otherFS(seedNeed.Quarantine, seedNeed.DataDir), seed)), Begin, ReasonNone)
}

func TestStreamBytesNeededLeavesHeadroom(t *testing.T) {
	if got, want := StreamBytesNeeded(100<<20), uint64(110<<20+64<<20); got != want {
		t.Fatalf("StreamBytesNeeded(100 MiB) = %d, want %d", got, want)
	}
	if got := StreamBytesNeeded(-1); got != 64<<20 {
		t.Fatalf("StreamBytesNeeded(-1) = %d, want 64 MiB", got)
	}
}

// Review (issue 38): a dedicated --wal-dir on a filesystem of its own was
// never checked: a learner that cannot preallocate its first 64 MiB WAL
// segment there stalls after its add, and the voter is lost. Its free space
// must hold that segment and the slack, like every filesystem an attempt
// writes to.
func TestDiskFullOnADedicatedWALDisk(t *testing.T) {
	const db = 1 << 30
	need := AttemptBytesNeeded(db, false, true)
	walDisk := func(free uint64) opt {
		return func(s *spec) {
			s.in.FreeBytes = need.Quarantine
			s.in.WALDirDedicated, s.in.WALDirOtherFS, s.in.WALDirFreeBytes = true, true, free
		}
	}
	want(t, Decide(cluster(3, 2, dbSize(db), walDisk(WALDirBytesNeeded))), Begin, ReasonNone)
	d := Decide(cluster(3, 2, dbSize(db), walDisk(WALDirBytesNeeded-1)))
	want(t, d, Refuse, ReasonDiskFull)
	if !strings.Contains(d.Detail, "WAL dir") {
		t.Fatalf("detail %q, want it to name the WAL dir's filesystem", d.Detail)
	}
	// On the data dir's or the quarantine's filesystem: counted there.
	want(t, Decide(cluster(3, 2, dbSize(db), walDisk(0), func(s *spec) { s.in.WALDirOtherFS = false })), Begin, ReasonNone)
}
