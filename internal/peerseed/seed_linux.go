package peerseed

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames from to to, failing with os.ErrExist if to exists
// (a plain rename would silently replace an empty directory at to).
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// The filesystem (or kernel) lacks RENAME_NOREPLACE.
		return renameIfAbsent(from, to)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// startWriteback asks the kernel to start writing f's bytes [off, off+n)
// out now (sync_file_range SYNC_FILE_RANGE_WRITE: it does not wait), so
// that the fsync at the end of a stream finds little left. Best effort.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// awaitWriteback waits until f's bytes [off, off+n) are on disk (their
// writeback started, and finished). Best effort.
func awaitWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
}
