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
	at, err := h.dataDirAt()
	if err != nil {
		return "", err
	}
	disp, reason, why := plan.DataDirDisposal(at, string(localdisk.ClassifyLayout(localdisk.DataDirOnly(h.cfg.DataDir)).Class))
	switch disp {
	case plan.DisposeKeep:
		h.log.Info("data dir left in place", zap.String("dataDir", h.cfg.DataDir), zap.String("why", why))
		return "", nil
	case plan.DisposeRefuse:
		return "", fmt.Errorf("%s: %s", reason, why)
	case plan.DisposeQuarantineContents:
		if err := h.fence(ctx, quarantineTimeout); err != nil {
			return "", err
		}
		dst, err := localdisk.QuarantineMemberDir(h.cfg.DataDir, time.Now())
		if err != nil {
			return "", fmt.Errorf("set aside the member data of %s: %w", h.cfg.DataDir, err)
		}
		h.log.Info("data dir kept in place: its member data set aside inside it", zap.String("why", why), zap.String("to", dst))
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

// dataDirAt: the data dir is a mount point now (the mount table) or a PV's
// path (the identity), and whether its path is a symlink now.
func (h *Healer) dataDirAt() (plan.DataDirAt, error) {
	mount, err := h.mountPoint(h.cfg.DataDir)
	if err != nil {
		return plan.DataDirAt{}, fmt.Errorf("is data dir %s a mount point: %w", h.cfg.DataDir, err)
	}
	link, err := localdisk.IsSymlink(h.cfg.DataDir)
	if err != nil {
		return plan.DataDirAt{}, fmt.Errorf("is data dir %s a symlink: %w", h.cfg.DataDir, err)
	}
	return plan.DataDirAt{VolumeRoot: mount || h.cfg.DataDirVolumeRoot, Symlink: link}, nil
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
	mount, link, err := h.walDirAt()
	if err != nil {
		return "", err
	}
	if disp, reason, why := plan.WALDirDisposal(true, mount, link); disp == plan.DisposeRefuse {
		return "", fmt.Errorf("%s: %s", reason, why)
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
	// Named apart from the data dir's copies, which --quarantine-keep
	// prunes by their own name, and from other members' WAL copies in a
	// shared quarantine (review: one member's prune took another's).
	dst, err := localdisk.QuarantineAs(wal, root, walCopyName(h.cfg.Member, wal), time.Now())
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
	return filepath.Join(filepath.Dir(walDir), localdisk.VolumeQuarantineDirName)
}

// walDirAt: the dedicated WAL dir is a mount point now (the mount table) or
// a mount root in etcd's container (the identity), and whether its path is
// a symlink now.
func (h *Healer) walDirAt() (mount, link bool, err error) {
	wal := h.cfg.WALDir
	if mount, err = h.mountPoint(wal); err != nil {
		return false, false, fmt.Errorf("is the WAL dir %s a mount point: %w", wal, err)
	}
	if link, err = localdisk.IsSymlink(wal); err != nil {
		return false, false, fmt.Errorf("is the WAL dir %s a symlink: %w", wal, err)
	}
	return mount || h.cfg.WALDirMountRoot, link, nil
}

// LayoutFacts sets in what the decision needs to know about where the
// member's data dir and WAL dir lie (cfg's DataDir, WALDir, QuarantineDir,
// DataDirVolumeRoot, WALDirMountRoot), as a healer of cfg would: for a
// decision made without one (`etcd-agent status`).
func LayoutFacts(in *plan.Input, cfg Config) {
	(&Healer{cfg: cfg, mountPoint: localdisk.IsMountPoint}).layoutInput(in)
}

// layoutInput sets what the decision needs to know about where the data
// dir and the WAL dir lie (plan.DataDirDisposal, WALDirDisposal, and the
// WAL disk's free space): the looks the executor takes again right before
// its renames. A look that fails leaves the fact unknown here; the
// executor's own look then refuses.
func (h *Healer) layoutInput(in *plan.Input) {
	in.DataDirVolumeRoot = h.cfg.DataDirVolumeRoot
	if at, err := h.dataDirAt(); err == nil {
		in.DataDirVolumeRoot, in.DataDirSymlink = at.VolumeRoot, at.Symlink
	}
	if in.WALDirDedicated = h.cfg.WALDir != ""; !in.WALDirDedicated {
		return
	}
	in.WALDirMountPoint = h.cfg.WALDirMountRoot
	if mount, link, err := h.walDirAt(); err == nil {
		in.WALDirMountPoint, in.WALDirSymlink = mount, link
	}
	in.WALDirFreeBytes, in.WALDirOtherFS = localdisk.WALSpace(h.cfg.WALDir, h.cfg.DataDir, h.cfg.QuarantineDir)
}

// walCopyName is the name (before its stamp) of member's WAL dir copies:
// wal-<member>-<the WAL dir's basename>.
func walCopyName(member, walDir string) string {
	return "wal-" + member + "-" + filepath.Base(filepath.Clean(walDir))
}
