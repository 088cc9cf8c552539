package heal

// The seed's copy of the pre-change backup, written during the backup's
// stream (peerseed.AlsoCopyTo) as a seed stream in the quarantine: seed
// mode then moves it into the learner's data dir instead of copying the
// backup after the add. It is a transient copy like any seed stream
// (removed when the attempt closes, removeSeedStreams); the backup itself
// stays as streamed. The move hashes it again, and it must match the
// sha256 the backup's stream was verified against (peerseed.BuildDataDir).

import (
	"os"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// backupCopy is where the copy of recovery's backup is.
type backupCopy struct {
	recovery, path string
}

// copyForSeed is the backup stream's options: a copy for the seed when the
// backup will seed the learner (seed mode, a rejoin not seeded from a
// move's stored snapshot) and the move into the data dir is a rename (the
// data dir on the quarantine's filesystem). A copy nothing takes would
// only hold the room the store's fetch needs.
func (h *Healer) copyForSeed(j journal.Record) []peerseed.StreamOption {
	if h.cfg.NoCopyDuringStream || !plan.BackupWouldSeed(j, h.planConfig()) {
		return nil
	}
	if localdisk.SpaceFor(h.cfg.DataDir, h.cfg.QuarantineDir).DataDirOtherFS {
		return nil
	}
	return []peerseed.StreamOption{peerseed.AlsoCopyTo(h.seedStreamPath())}
}

// keepBackupCopy remembers the copy written with j's backup (or says why
// there is none when one was asked).
func (h *Healer) keepBackupCopy(j journal.Record, snap peerseed.Snapshot) {
	h.backupCopy = backupCopy{recovery: j.ID, path: snap.Copy}
	if snap.Copy == "" && snap.CopyErr != nil {
		h.log.Info("no copy of the backup for the seed (the seed copies the backup after the add)", zap.Error(snap.CopyErr))
	}
}

// backupCopyOf is the copy of j's backup for the seed, "" when there is
// none of this attempt or it is not the backup's size.
func (h *Healer) backupCopyOf(j journal.Record) string {
	c := h.backupCopy
	if c.path == "" || c.recovery != j.ID || j.SnapshotPath == "" {
		return ""
	}
	if st, err := os.Stat(c.path); err != nil || st.Size() != j.SnapshotBytes {
		return ""
	}
	return c.path
}
