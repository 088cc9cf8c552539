package heal

import (
	"context"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
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
	gone := cluster3(memberstate.Lost, 2, 3)
	gone.Observation.Members = gone.Observation.Members[1:] // our old member is removed
	r := newRig(t, gone)
	r.journalAt(t, "auto", journal.PhaseRemoved, 0xa1, 0)
	j := r.journal(t)
	j.BackupSeeds, j.SnapshotPath, j.SnapshotSHA256, j.SnapshotClusterID = true, "/nowhere/snapshot-m1-2026-12-03T21-00-00Z.db", "ab", 0xc1
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	r.h.Consider(context.Background(), gone, nil)
	if got := r.journal(t); got.BackupSeeds {
		t.Fatalf("journal after the resume: backupSeeds still set (phase %s)", got.Phase)
	}
}
