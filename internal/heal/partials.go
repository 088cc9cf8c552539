package heal

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"go.uber.org/zap"
)

// removeKilledStreams removes this member's part files from the
// quarantine, once per Healer (per process on a node; per worker for a pod
// member, whose earlier worker's streams were cancelled with it) and before
// any stream of it can run: the backup's (snapshot-<member>-<stamp>.db.part)
// and the seed's (seed-<member>-<stamp>.db.part, a store fetch's temp
// file). A stream renames or removes its part file when it ends; one found
// now was left by a killed agent. It is never a copy of anything
// (unverified, named by no journal), and it would weigh against the next
// attempt's room. So would the seed streams it left (finished copies too:
// a seed is never taken across a restart) and the whole backup it streamed
// and never journaled as taken (removeUntakenBackup).
func (h *Healer) removeKilledStreams() {
	if h.killedStreamsRemoved {
		return
	}
	h.killedStreamsRemoved = true
	h.removeUntakenBackup()
	if !h.cfg.Plan.DryRun {
		h.removeSeedStreams() // transient; a restarted agent never takes one
	}
	des, err := os.ReadDir(h.cfg.QuarantineDir)
	if err != nil {
		if !os.IsNotExist(err) {
			h.log.Warn("could not list the quarantine for a killed agent's part files", zap.Error(err))
		}
		return
	}
	for _, de := range des {
		name := de.Name()
		if !de.Type().IsRegular() || !h.isOwnPartFile(name) {
			continue
		}
		p := filepath.Join(h.cfg.QuarantineDir, name)
		if h.cfg.Plan.DryRun {
			h.log.Info("dry-run: a part file a killed agent left would be removed; kept", zap.String("path", p))
			continue
		}
		if err := localdisk.RemoveQuarantined(h.cfg.QuarantineDir, localdisk.QuarantineEntry{Path: p}); err != nil {
			h.log.Warn("could not remove a killed agent's part file", zap.String("path", p), zap.Error(err))
			continue
		}
		h.log.Info("removed a part file a killed agent left (a partial stream, never a copy)", zap.String("path", p))
	}
}

// isOwnPartFile: name is exactly a part file this member's streams write
// (a store fetch's is .<seed stream>.<random>.part).
func (h *Healer) isOwnPartFile(name string) bool {
	if fetch, ok := strings.CutPrefix(name, "."+h.seedStreamPrefix()); ok {
		return strings.HasSuffix(fetch, ".part") && isSeedStreamOf(name[1:], h.seedStreamPrefix())
	}
	if _, rest, ok := localdisk.CutSnapshotName(name, h.cfg.Member); ok {
		return rest == ".part"
	}
	base, ok := strings.CutSuffix(name, ".db.part")
	if !ok {
		return false
	}
	stamp, ok := strings.CutPrefix(base, h.seedStreamPrefix())
	return ok && len(stamp) == len(seedStampLayout) && isSeedStreamOf(name, h.seedStreamPrefix())
}

// removeUntakenBackup removes the backup the member's last journal says it
// streamed (BackupStreaming) and did not take (SnapshotPath names another,
// or none): the agent was killed between the stream's rename and the
// snapshot step's record, or before the drop at the attempt's end.
func (h *Healer) removeUntakenBackup() {
	j, ok, err := journal.Load(h.cfg.StateDir, h.cfg.Member)
	if err != nil || !ok {
		return
	}
	h.removeUntaken(j, "a killed agent", "the agent was stopped in between")
}

// removeUntaken removes j's untaken backup (its stream renamed it into
// place, its record never saved). No membership change came after it: the
// next step is decided on the saved journal (changes follow the record), so
// it is redundant, and the attempt streams its own. Only a regular file
// named as this member's backups are, in the quarantine, and not older than
// the recovery, ever goes; who and why are for the log and the Event.
func (h *Healer) removeUntaken(j journal.Record, who, why string) {
	if j.BackupStreaming == "" || j.BackupStreaming == j.SnapshotPath {
		return
	}
	p := j.BackupStreaming
	_, rest, own := localdisk.CutSnapshotName(filepath.Base(p), h.cfg.Member)
	if !own || rest != "" || filepath.Dir(filepath.Clean(p)) != filepath.Clean(h.cfg.QuarantineDir) {
		h.log.Warn("the journal names a backup stream outside this member's backups; kept", zap.String("path", p))
		return
	}
	st, err := os.Lstat(p)
	if err != nil || !st.Mode().IsRegular() {
		return // never renamed into place, or already gone
	}
	if st.ModTime().Before(j.StartedAt.Truncate(time.Second)) {
		h.log.Warn("the backup the journal streamed to is older than its recovery: not its stream's; kept", zap.String("path", p),
			zap.Time("modified", st.ModTime()), zap.Time("recoveryStarted", j.StartedAt))
		return
	}
	if h.cfg.Plan.DryRun {
		h.log.Info("dry-run: a backup "+who+" streamed and never took would be removed; kept", zap.String("path", p))
		return
	}
	if err := localdisk.RemoveQuarantined(h.cfg.QuarantineDir, localdisk.QuarantineEntry{Path: p}); err != nil {
		h.pruneError("remove the backup "+who+" streamed and never took", err)
		return
	}
	h.metrics.QuarantinePrunedTotal.WithLabelValues(h.cfg.Member).Inc()
	h.log.Info("removed a backup "+who+" streamed and never took (no membership change followed it)",
		zap.String("path", p), zap.String("recovery", j.ID), zap.String("taken", j.SnapshotPath), zap.String("why", why))
	h.event("Normal", nodereport.ReasonUntakenBackupRemoved,
		"member %s: deleted %s, a pre-change backup recovery %s streamed and never took (%s; no membership change followed it)",
		h.cfg.Member, p, j.ID, why)
}
