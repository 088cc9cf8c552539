package localdisk

import (
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
