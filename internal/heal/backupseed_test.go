package heal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// The pre-change backup seeds only a rejoin's learner, streamed by this
// attempt and not resumed since, with its cluster known, unless turned off.
func TestTheBackupSeedsOnlyARejoinThatDidNotResume(t *testing.T) {
	ok := journal.Record{BackupSeeds: true, SnapshotPath: "/q/snapshot-m1-2026-12-03T21-00-00Z.db", SnapshotSHA256: "ab", SnapshotClusterID: 0xc1, Request: "rejoin"}
	with := func(change func(*journal.Record)) journal.Record { j := ok; change(&j); return j }
	for _, tc := range []struct {
		name string
		j    journal.Record
		off  bool
		want bool
	}{
		{"a rejoin's own backup", ok, false, true},
		{"--seed-from-backup=false", ok, true, false},
		{"resumed since (or a stranded learner removed)", with(func(j *journal.Record) { j.BackupSeeds = false }), false, false},
		{"no backup", with(func(j *journal.Record) { j.SnapshotPath = "" }), false, false},
		{"no sha256 to check the copy against", with(func(j *journal.Record) { j.SnapshotSHA256 = "" }), false, false},
		{"its cluster unknown", with(func(j *journal.Record) { j.SnapshotClusterID = 0 }), false, false},
		{"a move-in (seeded from the store)", with(func(j *journal.Record) { j.Request = plan.ActionMoveIn }), false, false},
		{"a move-away (no learner here)", with(func(j *journal.Record) { j.Request = plan.ActionMoveAway }), false, false},
	} {
		h := &Healer{cfg: Config{NoBackupSeed: tc.off}, log: zap.NewNop()}
		if got := h.backupSeeds(&tc.j); got != tc.want {
			t.Errorf("%s: backupSeeds = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A recovery that resumes after its backup (an agent restart, a Lease lost
// and taken again) no longer seeds from it: another agent may have held the
// Lease meanwhile and added and removed a learner, which a fresh member list
// does not show but a learner seeded from the older backup would replay.
func TestAResumedRecoveryNoLongerSeedsFromItsBackup(t *testing.T) {
	r, gone := resumedPastRemoveWithBackupSeeds(t)
	r.h.Consider(context.Background(), gone, nil)
	if got := r.journal(t); got.BackupSeeds {
		t.Fatalf("journal after the resume: backupSeeds still set (phase %s)", got.Phase)
	}
}

// The backup seeds only while the Lease, read fresh right before the build,
// is still ours: a process frozen past the TTL mid-step (nothing resumed)
// may have missed another agent's changes. No provenance record is written.
func TestTheBackupSeedsOnlyUnderALeaseReadFreshAsOurs(t *testing.T) {
	dir := t.TempDir()
	backup := filepath.Join(dir, "snapshot-m1-2026-12-03T21-00-00Z.db")
	if err := os.WriteFile(backup, []byte("db"), 0o600); err != nil {
		t.Fatal(err)
	}
	j := journal.Record{BackupSeeds: true, SnapshotPath: backup, SnapshotBytes: 2, SnapshotSHA256: "ab", SnapshotClusterID: 0xc1}
	lost := &fakeLease{other: "node9/m9"} // another agent took it; ours is gone
	h := &Healer{cfg: Config{Member: "m1", QuarantineDir: dir}, log: zap.NewNop(), lease: lost}
	err := h.seedFromBackup(context.Background(), cluster3(memberstate.Lost, 2, 3), &j)
	if err == nil || !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("seedFromBackup under a Lease another agent holds: %v, want a refusal (not held)", err)
	}
	if _, err := os.Stat(peerseed.SeedSourcePath(backup)); !os.IsNotExist(err) {
		t.Fatalf("a provenance record was written beside the backup (%v)", err)
	}
}

// resumedPastRemoveWithBackupSeeds: a rig whose journal is open past the
// removal of our old member, its backup (a file that is not there) still
// flagged to seed the learner, and the cluster as the removal left it.
func resumedPastRemoveWithBackupSeeds(t *testing.T) (*rig, memberstate.Result) {
	t.Helper()
	gone := cluster3(memberstate.Lost, 2, 3)
	gone.Observation.Members = gone.Observation.Members[1:] // our old member is removed
	r := newRig(t, gone)
	r.journalAt(t, "auto", journal.PhaseRemoved, 0xa1, 0)
	j := r.journal(t)
	j.BackupSeeds, j.SnapshotPath, j.SnapshotSHA256, j.SnapshotClusterID = true, filepath.Join(r.dir, "snapshot-m1-2026-12-03T21-00-00Z.db"), "ab", 0xc1
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	return r, gone
}
