package localdisk

import (
	"os"
	"path/filepath"
	"syscall"
)

// FreeBytes reports the bytes an unprivileged writer can still use on the
// filesystem holding path: statfs f_bavail, which (unlike f_bfree) leaves
// out the blocks reserved for root.
func FreeBytes(path string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), nil
}

// FreeBytesUnder is the free space where dir is or will be: that of its
// nearest existing ancestor (0 when none can be read).
func FreeBytesUnder(dir string) uint64 {
	for d := dir; ; d = filepath.Dir(d) {
		if n, err := FreeBytes(d); err == nil {
			return n
		}
		if d == filepath.Dir(d) {
			return 0
		}
	}
}

// Space is the free space a recovery attempt can write into: the
// quarantine's filesystem and, when it is another one (a disk mounted at
// the data dir), the data dir's (plan.AttemptBytesNeeded).
type Space struct {
	QuarantineFree uint64
	DataDirFree    uint64
	DataDirOtherFS bool
}

// SpaceFor measures Space for dataDir and quarantineDir, each at its
// nearest existing ancestor (where it is or will be created). Unknown
// devices count as one filesystem: the quarantine's free space then covers
// the whole attempt, the stricter check.
func SpaceFor(dataDir, quarantineDir string) Space {
	s := Space{QuarantineFree: FreeBytesUnder(quarantineDir), DataDirFree: FreeBytesUnder(dataDir)}
	dd, ok1 := deviceUnder(dataDir)
	qd, ok2 := deviceUnder(quarantineDir)
	s.DataDirOtherFS = ok1 && ok2 && dd != qd
	return s
}

// deviceUnder is the device of path's nearest existing ancestor.
func deviceUnder(path string) (uint64, bool) {
	for d := path; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil {
			return deviceOf(fi), true
		}
		if d == filepath.Dir(d) {
			return 0, false
		}
	}
}

// WALSpace is the free space where a dedicated WAL dir is or will be, and
// whether that filesystem is neither the data dir's nor the quarantine's
// (then the attempt's other checks do not cover it: plan.WALDirBytesNeeded).
func WALSpace(walDir, dataDir, quarantineDir string) (free uint64, ownFS bool) {
	wd, ok := deviceUnder(walDir)
	if !ok {
		return 0, false
	}
	dd, ok1 := deviceUnder(dataDir)
	qd, ok2 := deviceUnder(quarantineDir)
	return FreeBytesUnder(walDir), ok1 && ok2 && wd != dd && wd != qd
}
