package plan

import (
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// Disposal is what the stop step does with the member's data dir before the
// rejoin (rule 8: replaced data is renamed into the quarantine, never
// deleted).
type Disposal string

// Disposals.
const (
	// DisposeQuarantine: rename the data dir into the quarantine.
	DisposeQuarantine Disposal = "quarantine"
	// DisposeQuarantineContents: the data dir is a volume's root (a mount
	// point, or a PV's path): it is never renamed or removed (a local PV
	// whose path is gone cannot be mounted again; a bind mount follows the
	// rename). Its member/ dir, all etcd reads of it, is renamed into an
	// etcd-agent-quarantine dir inside it, on the same volume; the learner
	// starts in the same path.
	DisposeQuarantineContents Disposal = "quarantine-contents"
	// DisposeKeep: nothing of etcd's to keep (missing, or an empty volume
	// root: etcd reads only member/, and other entries such as a fresh
	// filesystem's lost+found are left where they are).
	DisposeKeep Disposal = "keep"
	// DisposeRefuse: the dir cannot be set aside where the learner could
	// start (WALDirDisposal).
	DisposeRefuse Disposal = "refuse"
)

// DataDirAt is where the data dir lies: at a volume's root (the mount
// table or the PV) and/or behind a symlink (its last path element is a link,
// /var/lib/etcd -> a dedicated disk's dir).
type DataDirAt struct{ VolumeRoot, Symlink bool }

// DataDirDisposal decides what happens to the data dir given where it lies
// and its class (localdisk: missing, empty, ok, in-use, corrupt, foreign,
// stale, not-a-directory: a file is renamed like a dir). Decided before the
// stop (checkBegin refuses with the returned reason), and again by the
// executor right before the rename, on a fresh look. A symlinked data dir is
// kept like a volume's root: renaming the link would leave the member's data
// on the disk it points to and start the learner in a new dir at the link's
// path, on another disk.
func DataDirDisposal(at DataDirAt, class string) (Disposal, Reason, string) {
	switch {
	case at.Symlink && class == "missing":
		return DisposeRefuse, ReasonDataDirLinkDangling, "the data dir is a symlink whose target does not exist (a disk not mounted?): " +
			"the member's data is most likely there, and etcd cannot start through a dangling link; mount the disk or fix the link, then the agent looks again"
	case class == "missing":
		return DisposeKeep, "", "data dir missing: nothing to quarantine"
	case at.Symlink && class == observation.DataDirNotADirectory:
		// A link to a file: the link is renamed like a file, the target kept.
		return DisposeQuarantine, "", ""
	case !at.VolumeRoot && !at.Symlink:
		return DisposeQuarantine, "", ""
	case class == "empty":
		return DisposeKeep, "", "data dir is an empty volume root or link target (no member/ dir): nothing to quarantine, the learner starts in it"
	case class == observation.DataDirNotADirectory:
		return DisposeRefuse, ReasonDataDirMountPoint, "data dir is a mount point that is not a directory (a file mounted over its path): it cannot be renamed into the quarantine " +
			"and is never deleted; unmount it and move it aside by hand, then the agent rejoins the member"
	}
	where := "a volume's root (a mount point or a PV's path)"
	if at.Symlink {
		where = "a symlink (kept, with the dir it points to)"
	}
	return DisposeQuarantineContents, "", fmt.Sprintf("data dir is %s holding etcd data (%s): it is never renamed; "+
		"its member/ dir is set aside inside it, on the same volume, and the learner starts in the same path", where, class)
}

// WALDirDisposal decides what the stop step does with a dedicated WAL dir
// (--wal-dir) besides the data dir: it is renamed into a quarantine on its
// own filesystem (never deleted), so the learner's WAL dir is empty and its
// own. A WAL dir that is a mount point is refused: etcd creates a new
// member's WAL in a temp dir beside it and renames it into place after
// removing the dir, which a mount point refuses (EBUSY, etcd-io/etcd#20218),
// so the learner could never start there.
//
// A WAL dir that is a symlink is refused too: etcd removes the dir before
// that rename, which removes the link, so the learner's WAL would land
// beside the link, on its filesystem, not on the disk it pointed to.
func WALDirDisposal(dedicated, mountPoint, symlink bool) (Disposal, Reason, string) {
	switch {
	case !dedicated:
		return DisposeKeep, "", "the WAL is in the data dir's member/wal"
	case symlink:
		return DisposeRefuse, ReasonWALDirSymlink, "the dedicated WAL dir (--wal-dir) is a symlink: etcd creates a new member's WAL in a temp dir beside it and " +
			"renames it into place after removing the dir, which removes the link, so a rejoined member's WAL would leave the disk the link points to; " +
			"point --wal-dir at the link's target (the member stopped), then the agent rejoins the member"
	case mountPoint:
		return DisposeRefuse, ReasonWALDirMountPoint, "the dedicated WAL dir (--wal-dir) is a mount point: etcd cannot create a new member's WAL at a mount point " +
			"(it removes the dir to rename its temp WAL dir into place: device or resource busy, etcd-io/etcd#20218), so a rejoined member could not start; " +
			"point --wal-dir at a subdirectory of that mount (move the .wal files there with the member stopped), then the agent rejoins the member"
	}
	return DisposeQuarantine, "", ""
}
