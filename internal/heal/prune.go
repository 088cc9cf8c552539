package heal

import (
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"go.uber.org/zap"
)

// seen ends the member's healthy run (the prune's clock) on a result that
// is not healthy: any result the healer is handed, whatever it decides (a
// refused recovery never reaches Housekeep).
func (h *Healer) seen(v memberstate.Verdict) bool {
	if v.State != memberstate.Healthy || v.MajorityLost {
		h.healthySince = time.Time{}
		return false
	}
	return true
}

// Housekeep enforces --quarantine-keep from the idle loop, on an
// observation no recovery acted on: the member's copies (quarantined data
// dirs, pre-change snapshots) beyond the newest QuarantineKeep of each kind
// are deleted once they are provably redundant (localdisk.Prunable): the
// member has been healthy (the tracker's verdict, quorum held) since after
// they were made, and for QuarantinePruneAfter, and no recovery is open.
// These are the only deletions the agent makes: each is logged, an Event
// and counted.
func (h *Healer) Housekeep(res memberstate.Result) {
	h.removeKilledStreams()
	// A reused probe's alarms and peers are an older probe's: it may end
	// the healthy run, never start it or prune.
	if !h.seen(res.Verdict) || res.Observation.PeersReused {
		return
	}
	if h.healthySince.IsZero() {
		h.healthySince = res.Observation.At
	}
	if h.now().Sub(h.healthySince) < h.cfg.QuarantinePruneAfter {
		return // cheap: most polls stop here (the run below only starts later)
	}
	j, _, err := journal.Load(h.cfg.StateDir, h.cfg.Member)
	if err != nil {
		h.pruneError("read the journal before pruning the quarantine", err)
		return
	}
	since := h.healthySince
	if j.FinishedAt.After(since) {
		// A recovery ran unseen by this loop: healthy since its end at most.
		since = j.FinishedAt
	}
	st := localdisk.PruneState{Keep: h.cfg.QuarantineKeep, RecoveryOpen: j.Active(), HealthySince: since,
		Now: h.now(), MinHealthy: h.cfg.QuarantinePruneAfter, Protect: []string{j.QuarantinePath, j.WALQuarantinePath, j.SnapshotPath}}
	if st.RecoveryOpen || st.Now.Sub(since) < st.MinHealthy {
		return // no need to list the quarantine
	}
	entries, err := h.quarantinedCopies()
	if err != nil {
		h.pruneError("list the quarantine", err)
		return
	}
	prunable := localdisk.Prunable(entries, st)
	if h.cfg.Plan.DryRun {
		// Dry-run: nothing changes, pruning included; say once what would go.
		if len(prunable) > 0 && !h.dryRunPruneSaid {
			h.dryRunPruneSaid = true
			paths := make([]string, len(prunable))
			for i, e := range prunable {
				paths[i] = e.Path
			}
			h.log.Info("dry-run: quarantined copies beyond --quarantine-keep would be pruned; kept", zap.Strings("paths", paths))
		}
		return
	}
	for _, e := range prunable {
		if err := localdisk.RemoveQuarantined(e.Root, e); err != nil {
			h.pruneError("prune "+e.Path, err)
			continue
		}
		h.metrics.QuarantinePrunedTotal.WithLabelValues(h.cfg.Member).Inc()
		h.log.Info("quarantined copy pruned (--quarantine-keep): the member has been healthy since it was made",
			zap.String("path", e.Path), zap.String("kind", e.Kind), zap.Time("made", e.At), zap.Time("healthySince", since),
			zap.Int("keep", h.cfg.QuarantineKeep))
		if h.reporter != nil {
			h.reporter.Eventf("Normal", nodereport.ReasonQuarantinePruned,
				"member %s: deleted quarantined %s %s (made %s): beyond the newest %d, the member healthy since %s",
				h.cfg.Member, e.Kind, e.Path, e.At.Format(time.RFC3339), h.cfg.QuarantineKeep, since.UTC().Format(time.RFC3339))
		}
	}
}

// pruneError logs a pruning failure once per distinct error (Housekeep
// runs every poll) and counts each.
func (h *Healer) pruneError(what string, err error) {
	h.metrics.QuarantinePruneErrors.WithLabelValues(h.cfg.Member).Inc()
	if msg := what + ": " + err.Error(); msg != h.lastPruneErr {
		h.lastPruneErr = msg
		h.log.Warn("quarantine pruning failed; copies are kept", zap.String("what", what), zap.Error(err))
	}
}

// quarantinedCopies lists every copy of the member's data the agent made:
// in the quarantine, data dirs, snapshots and WAL dirs; beside a dedicated
// WAL dir on its own filesystem, WAL dirs; inside a data dir kept in place,
// member/ dirs (the roots quarantineWALDir and QuarantineMemberDir use).
func (h *Healer) quarantinedCopies() ([]localdisk.QuarantineEntry, error) {
	entries, err := localdisk.ListQuarantine(h.cfg.QuarantineDir, filepath.Base(h.cfg.DataDir), h.cfg.Member)
	if err != nil {
		return nil, err
	}
	type source struct{ root, prefix, kind string }
	sources := []source{{filepath.Join(h.cfg.DataDir, localdisk.VolumeQuarantineDirName), "member", localdisk.KindMemberDir}}
	if wal := h.cfg.WALDir; wal != "" {
		prefix := walCopyName(h.cfg.Member, wal)
		sources = append(sources, source{h.cfg.QuarantineDir, prefix, localdisk.KindWALDir})
		if beside := filepath.Join(filepath.Dir(wal), localdisk.VolumeQuarantineDirName); filepath.Clean(beside) != filepath.Clean(h.cfg.QuarantineDir) {
			sources = append(sources, source{beside, prefix, localdisk.KindWALDir})
		}
	}
	for _, src := range sources {
		es, err := localdisk.ListCopies(src.root, src.prefix, src.kind)
		if err != nil {
			return nil, err
		}
		entries = append(entries, es...)
	}
	return entries, nil
}
