package plan

import "fmt"

// Disposal is what the stop step does with the member's data dir before the
// rejoin (rule 8: replaced data is renamed into the quarantine, never
// deleted).
type Disposal string

// Disposals.
const (
	// DisposeQuarantine: rename the data dir into the quarantine.
	DisposeQuarantine Disposal = "quarantine"
	// DisposeKeep: nothing of etcd's to keep (missing, or an empty mount
	// point: etcd reads only member/, and other entries such as a fresh
	// filesystem's lost+found are left where they are).
	DisposeKeep Disposal = "keep"
	// DisposeRefuse: a mount point holding etcd data. It cannot be renamed
	// (EBUSY), its contents could only stay on the same disk, next to the
	// new member's data (a dedicated disk too small for both fills up), and
	// nothing is ever deleted: where the old data goes is a person's call.
	DisposeRefuse Disposal = "refuse"
)

// DataDirDisposal decides what happens to the data dir given whether it is
// a mount point and its class (localdisk: missing, empty, ok, in-use,
// corrupt, foreign). Decided before the stop (checkBegin refuses with
// ReasonDataDirMountPoint), and again by the executor right before the
// rename, on a fresh look.
func DataDirDisposal(mountPoint bool, class string) (Disposal, string) {
	switch {
	case class == "missing":
		return DisposeKeep, "data dir missing: nothing to quarantine"
	case !mountPoint:
		return DisposeQuarantine, ""
	case class == "empty":
		return DisposeKeep, "data dir is an empty mount point (no member/ dir): nothing to quarantine, the learner starts in it"
	}
	return DisposeRefuse, fmt.Sprintf("data dir is a mount point holding etcd data (%s): it cannot be renamed into the quarantine and is never deleted; "+
		"move its member/ dir aside by hand (on that disk or elsewhere, as space allows), then the agent rejoins the member", class)
}

// WALDirDisposal decides what the stop step does with a dedicated WAL dir
// (--wal-dir) besides the data dir: it is renamed into a quarantine on its
// own filesystem (never deleted), so the learner's WAL dir is empty and its
// own. A WAL dir that is a mount point is refused: etcd creates a new
// member's WAL in a temp dir beside it and renames it into place after
// removing the dir, which a mount point refuses (EBUSY, etcd-io/etcd#20218),
// so the learner could never start there.
func WALDirDisposal(dedicated, mountPoint bool) (Disposal, string) {
	switch {
	case !dedicated:
		return DisposeKeep, "the WAL is in the data dir's member/wal"
	case mountPoint:
		return DisposeRefuse, "the dedicated WAL dir (--wal-dir) is a mount point: etcd cannot create a new member's WAL at a mount point " +
			"(it removes the dir to rename its temp WAL dir into place: device or resource busy, etcd-io/etcd#20218), so a rejoined member could not start; " +
			"point --wal-dir at a subdirectory of that mount (move the .wal files there with the member stopped), then the agent rejoins the member"
	}
	return DisposeQuarantine, ""
}
