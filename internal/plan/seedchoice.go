package plan

import "github.com/etcd-agent/etcd-agent/internal/record"

// SeedSource is where a rejoin's learner's data dir comes from (the
// PrepareDataDir decision's Seed). A seed from anything but raft that
// fails falls back to the next: store or backup, then a follower's stream,
// then raft mode (docs/design.md §6, "Seed mode's source").
type SeedSource string

// Seed sources, in the order they are tried.
const (
	// SeedStore: a move's snapshot in the store, taken under the Lease
	// moments before its change (a move-in's own, or the pod move's the
	// member's claim names).
	SeedStore SeedSource = "store"
	// SeedBackup: this attempt's own pre-change backup (step 3), streamed
	// under the Lease it still holds: the db is streamed once.
	SeedBackup SeedSource = "backup"
	// SeedFollower: a snapshot streamed from a follower after the add.
	SeedFollower SeedSource = "follower"
	// SeedRaft: an empty data dir; the leader sends a raft snapshot.
	SeedRaft SeedSource = "raft"
)

// ChooseSeed is the first source to seed the learner of recovery j from.
// Never a data dir that went back in time (UC2): its copy may be of any
// age, and a membership change undone since crashes a learner seeded from
// it. A move never seeds from its own backup (that went to the store); a
// backup seeds only the attempt that streamed it (BackupSeeds is cleared
// on a resume: another agent may have changed the cluster since).
func ChooseSeed(j record.Record, cfg Config) SeedSource {
	switch {
	case !cfg.RejoinSeed:
		return SeedRaft
	case storeSeeds(j, cfg):
		return SeedStore
	case BackupMaySeed(j, cfg):
		return SeedBackup
	}
	return SeedFollower
}

// storeSeeds: a stored snapshot is j's learner's seed, a move-in's own or
// the one the pod move named on this member's claim (not the move-away's:
// the member leaving is not seeded here).
func storeSeeds(j record.Record, cfg Config) bool {
	return cfg.StoreOpens && !cfg.NoStoreSeed && j.StoreKey != "" &&
		(j.Request == ActionMoveIn || j.StoreKey == cfg.StoreSeedKey && j.Request != ActionMoveAway)
}

// BackupMaySeed: j's own pre-change backup may seed its learner, in seed
// mode or not (a flag the executor turns off on a resume and when another
// agent's learner appears): a rejoin's (a move's backup goes to the store),
// unless --seed-from-backup=false, while j.BackupSeeds holds and the
// backup is journaled with its hash and cluster.
func BackupMaySeed(j record.Record, cfg Config) bool {
	return !cfg.NoBackupSeed && !IsMove(j) && j.BackupSeeds && j.SnapshotPath != "" && j.SnapshotSHA256 != "" && j.SnapshotClusterID != 0
}

// BackupWouldSeed: a backup streamed for j would seed its learner (worth a
// copy written beside it while it streams): seed mode, a rejoin, not seeded
// from the store, unless --seed-from-backup=false.
func BackupWouldSeed(j record.Record, cfg Config) bool {
	return cfg.RejoinSeed && !cfg.NoBackupSeed && !IsMove(j) && !storeSeeds(j, cfg)
}

// IsMove: j moves a member (UC3, in or away): its backup goes to the
// snapshot store, and its learner is seeded from there, never from j's own
// backup.
func IsMove(j record.Record) bool {
	return j.Request == ActionMoveIn || j.Request == ActionMoveAway
}
