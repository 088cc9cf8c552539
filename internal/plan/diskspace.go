package plan

import (
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// What one recovery attempt writes, besides renames (the quarantined data
// dir is renamed, never copied):
//
//   - the pre-change backup snapshot, streamed into the quarantine (kept);
//   - seed mode: the seed stream, into the quarantine; BuildDataDir moves it
//     into the data dir when both share a filesystem (no second copy), and
//     copies it otherwise; the stream is removed afterwards, and a seed that
//     fails is removed before the raft-mode fallback begins;
//   - raft mode (and seed mode's fallback): the raft snapshot the leader
//     sends, which etcd writes into the data dir (member/snap/<i>.snap.db);
//   - etcd's first WAL segment in the data dir (preallocated, 64 MiB), also
//     the one BuildDataDir writes.
//
// Each copy of the db counts the largest member's db + 10% (it grows while
// streamed), and each filesystem keeps slackBytes on top, so the last
// attempt permitted never fills the disk.
const (
	walBytes   = 64 << 20
	slackBytes = 64 << 20
)

// AttemptBytes is what one recovery attempt needs free, per filesystem.
// DataDir is 0 when the data dir shares the quarantine's filesystem (then
// Quarantine holds everything).
type AttemptBytes struct {
	Quarantine uint64
	DataDir    uint64
}

// AttemptBytesNeeded counts what an attempt writes for a db of dbSize:
// seed says the learner's data dir is seeded from a stream (raft mode
// otherwise), sameFS that the data dir and the quarantine share a
// filesystem.
func AttemptBytesNeeded(dbSize int64, seed, sameFS bool) AttemptBytes {
	dbCopy := dbCopyBytes(dbSize)
	quarantine := dbCopy // the pre-change backup
	if seed {
		quarantine += dbCopy // the seed stream, until moved or removed
	}
	// The data dir receives one copy: the leader's raft snapshot (raft
	// mode, or seed mode's fallback after its stream was removed), or in
	// seed mode the stream moved in (no new bytes on one filesystem).
	dataDir := dbCopy + walBytes
	if sameFS {
		if seed {
			// The stream becomes the data dir's db; the fallback's raft
			// snapshot comes after the stream was removed: never both.
			dataDir = walBytes
		}
		return AttemptBytes{Quarantine: quarantine + dataDir + slackBytes}
	}
	return AttemptBytes{Quarantine: quarantine + slackBytes, DataDir: dataDir + slackBytes}
}

// dbCopyBytes is what one copy of a db of dbSize may weigh once written:
// it grows while it is streamed.
func dbCopyBytes(dbSize int64) uint64 { return uint64(max(dbSize, 0)) * 11 / 10 }

// StreamBytesNeeded is the free space one stream (or one seeded data dir)
// of a db of dbSize needs at the moment it is written: its copy plus the
// slack the filesystem keeps for the member itself. The writers check it
// again right before they write (the attempt's total is checked by Decide).
func StreamBytesNeeded(dbSize int64) uint64 { return dbCopyBytes(dbSize) + slackBytes }

// maxDBSize is the largest member db of the observation: what a snapshot
// from any of them may weigh.
func maxDBSize(o observation.Observation) int64 {
	var maxDB int64
	for _, m := range o.Members {
		maxDB = max(maxDB, m.DBSize)
	}
	return maxDB
}

// checkSpace refuses disk-full unless the free space holds everything the
// attempt writes, on each filesystem.
func checkSpace(in Input, cfg Config) (Decision, bool) {
	need := AttemptBytesNeeded(maxDBSize(in.Obs), cfg.RejoinSeed, !in.DataDirOtherFS)
	if in.FreeBytes < need.Quarantine {
		where := "the quarantine's filesystem (backup snapshot"
		if cfg.RejoinSeed {
			where += ", seed stream"
		}
		if !in.DataDirOtherFS {
			where += ", and the data dir's raft snapshot or seeded db and WAL: one filesystem"
		}
		return refuse(ReasonDiskFull, fmt.Sprintf("%d bytes free on %s), need %d", in.FreeBytes, where, need.Quarantine)), false
	}
	if in.DataDirOtherFS && in.DataDirFreeBytes < need.DataDir {
		return refuse(ReasonDiskFull, fmt.Sprintf("%d bytes free on the data dir's filesystem (raft snapshot or seeded db, WAL), need %d",
			in.DataDirFreeBytes, need.DataDir)), false
	}
	if in.WALDirDedicated && in.WALDirOtherFS && in.WALDirFreeBytes < WALDirBytesNeeded {
		return refuse(ReasonDiskFull, fmt.Sprintf("%d bytes free on the dedicated WAL dir's filesystem (the learner's first, preallocated WAL segment), need %d",
			in.WALDirFreeBytes, WALDirBytesNeeded)), false
	}
	return Decision{}, true
}

// WALDirBytesNeeded is what a dedicated WAL dir on a filesystem of its own
// needs free for one attempt: the learner's first WAL segment, which etcd
// preallocates, and the slack every filesystem keeps.
const WALDirBytesNeeded = walBytes + slackBytes
