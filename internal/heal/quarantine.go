package heal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// quarantineDataDir renames the data dir into the quarantine, fenced right
// before the rename, as plan.DataDirDisposal says on a fresh look: nothing
// to do for a missing data dir or an empty volume root (""); a volume root
// holding etcd data keeps its path and has its member/ set aside inside it.
func (h *Healer) quarantineDataDir(ctx context.Context) (string, error) {
	root, err := h.dataDirVolumeRoot()
	if err != nil {
		return "", err
	}
	disp, why := plan.DataDirDisposal(root, string(localdisk.ClassifyLayout(localdisk.DataDirOnly(h.cfg.DataDir)).Class))
	switch disp {
	case plan.DisposeKeep:
		h.log.Info("data dir left in place", zap.String("dataDir", h.cfg.DataDir), zap.String("why", why))
		return "", nil
	case plan.DisposeRefuse:
		return "", fmt.Errorf("%s: %s", plan.ReasonDataDirMountPoint, why)
	case plan.DisposeQuarantineContents:
		if err := h.fence(ctx, quarantineTimeout); err != nil {
			return "", err
		}
		dst, err := localdisk.QuarantineMemberDir(h.cfg.DataDir, time.Now())
		if err != nil {
			return "", fmt.Errorf("set aside the member data of %s: %w", h.cfg.DataDir, err)
		}
		h.log.Info("data dir is a volume's root: its member data set aside inside it", zap.String("why", why), zap.String("to", dst))
		return dst, nil
	}
	if err := os.MkdirAll(h.cfg.QuarantineDir, 0o700); err != nil {
		return "", err
	}
	if err := h.fence(ctx, quarantineTimeout); err != nil {
		return "", err
	}
	dst, err := localdisk.QuarantineDataDir(h.cfg.DataDir, h.cfg.QuarantineDir, time.Now())
	if err != nil {
		return "", fmt.Errorf("quarantine %s: %w", h.cfg.DataDir, err)
	}
	return dst, nil
}

// dataDirVolumeRoot: the data dir is a mount point now (the mount table) or
// a PV's path (the identity).
func (h *Healer) dataDirVolumeRoot() (bool, error) {
	mount, err := h.mountPoint(h.cfg.DataDir)
	if err != nil {
		return false, fmt.Errorf("is data dir %s a mount point: %w", h.cfg.DataDir, err)
	}
	return mount || h.cfg.DataDirVolumeRoot, nil
}

// quarantineWALDir renames a dedicated WAL dir (--wal-dir) into a
// quarantine on its own filesystem, fenced right before the rename, as
// plan.WALDirDisposal says on a fresh look: "" when there is none or it is
// missing or empty (etcd creates the learner's). Done before the data dir's:
// a data dir gone with the WAL left reads as corrupt, never as empty.
func (h *Healer) quarantineWALDir(ctx context.Context) (string, error) {
	wal := h.cfg.WALDir
	if wal == "" {
		return "", nil
	}
	mount, err := h.mountPoint(wal)
	if err != nil {
		return "", fmt.Errorf("is the WAL dir %s a mount point: %w", wal, err)
	}
	if disp, why := plan.WALDirDisposal(true, mount || h.cfg.WALDirMountRoot); disp == plan.DisposeRefuse {
		return "", fmt.Errorf("%s: %s", plan.ReasonWALDirMountPoint, why)
	}
	if entries, err := os.ReadDir(wal); errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return "", nil
	}
	if err := os.MkdirAll(h.cfg.QuarantineDir, 0o700); err != nil {
		return "", err
	}
	root := walQuarantineRoot(wal, h.cfg.QuarantineDir)
	if err := h.fence(ctx, quarantineTimeout); err != nil {
		return "", err
	}
	// Named apart from the data dir's copies (wal-<name>), which
	// --quarantine-keep prunes: a WAL dir whose name is the data dir's
	// would be counted as one (review, helper 4).
	dst, err := localdisk.QuarantineAs(wal, root, "wal-"+filepath.Base(filepath.Clean(wal)), time.Now())
	if err != nil {
		return "", fmt.Errorf("quarantine the WAL dir %s: %w", wal, err)
	}
	return dst, nil
}

// walQuarantineRoot is where a dedicated WAL dir is set aside: the
// quarantine when it is on the WAL's filesystem (a rename), else an
// etcd-agent-quarantine dir beside the WAL dir (a WAL disk of its own).
func walQuarantineRoot(walDir, quarantineDir string) string {
	if localdisk.SameFilesystem(filepath.Dir(walDir), quarantineDir) {
		return quarantineDir
	}
	return filepath.Join(filepath.Dir(walDir), "etcd-agent-quarantine")
}
