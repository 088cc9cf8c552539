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
// corrupt, foreign, stale, not-a-directory: a file is renamed like a dir).
// Decided before the stop (checkBegin refuses with ReasonDataDirMountPoint),
// and again by the executor right before the rename, on a fresh look.
func DataDirDisposal(mountPoint bool, class string) (Disposal, string) {
	switch {
	case class == "missing":
		return DisposeKeep, "data dir missing: nothing to quarantine"
	case !mountPoint:
		return DisposeQuarantine, ""
	case class == "empty":
		return DisposeKeep, "data dir is an empty mount point (no member/ dir): nothing to quarantine, the learner starts in it"
	case class == observation.DataDirNotADirectory:
		return DisposeRefuse, "data dir is a mount point that is not a directory (a file mounted over its path): it cannot be renamed into the quarantine " +
			"and is never deleted; unmount it and move it aside by hand, then the agent rejoins the member"
	}
	return DisposeRefuse, fmt.Sprintf("data dir is a mount point holding etcd data (%s): it cannot be renamed into the quarantine and is never deleted; "+
		"move its member/ dir aside by hand (on that disk or elsewhere, as space allows), then the agent rejoins the member", class)
}
