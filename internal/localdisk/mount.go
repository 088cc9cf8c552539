package localdisk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// IsMountPoint reports whether path is a mount point (false, nil when it
// does not exist; a symlink is not one). A mount-point data dir cannot be
// renamed into the quarantine (EBUSY), so the decision core must know
// before the stop (plan.DataDirDisposal).
//
// On Linux 5.8+ statx's STATX_ATTR_MOUNT_ROOT answers, bind mounts of the
// same filesystem included; elsewhere a path is a mount point when its
// device differs from its parent's, or it is its own parent (the root).
func IsMountPoint(path string) (bool, error) { return isMountPoint(path, true) }

func isMountPoint(path string, useStatx bool) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	fi, err := os.Lstat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case fi.Mode()&fs.ModeSymlink != 0:
		return false, nil
	}
	if useStatx {
		if root, known := statxMountRoot(abs); known {
			return root, nil
		}
	}
	parent, err := os.Stat(filepath.Dir(abs))
	if err != nil {
		return false, fmt.Errorf("parent of %s: %w", abs, err)
	}
	return mountPointByDevice(devInoOf(fi), devInoOf(parent)), nil
}

// devIno is a file's device and inode.
type devIno struct{ dev, ino uint64 }

func devInoOf(fi os.FileInfo) devIno {
	st := fi.Sys().(*syscall.Stat_t)
	return devIno{dev: uint64(st.Dev), ino: uint64(st.Ino)}
}

// mountPointByDevice: another filesystem is mounted at self when its device
// differs from its parent's; the root is its own parent.
func mountPointByDevice(self, parent devIno) bool { return self.dev != parent.dev || self == parent }

// IsSymlink reports whether path's last element is a symlink (false, nil
// when it does not exist). A symlinked data dir is kept with its target
// (plan.DataDirDisposal); a symlinked WAL dir is refused (WALDirDisposal).
func IsSymlink(path string) (bool, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	return fi.Mode()&fs.ModeSymlink != 0, nil
}
