package heal

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
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
// attempt's room.
func (h *Healer) removeKilledStreams() {
	if h.killedStreamsRemoved {
		return
	}
	h.killedStreamsRemoved = true
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
	base, ok := strings.CutSuffix(name, ".db.part")
	if !ok {
		return false
	}
	if stamp, ok := strings.CutPrefix(base, "snapshot-"+h.cfg.Member+"-"); ok {
		return localdisk.IsSnapshotStamp(stamp)
	}
	stamp, ok := strings.CutPrefix(base, h.seedStreamPrefix())
	return ok && len(stamp) == len(seedStampLayout) && isSeedStreamOf(name, h.seedStreamPrefix())
}
