package localdisk

import "golang.org/x/sys/unix"

// statxMountRoot asks statx whether path is the root of a mount; known is
// false when the kernel does not say (before Linux 5.8) or statx fails.
func statxMountRoot(path string) (root, known bool) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st); err != nil {
		return false, false
	}
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, false
	}
	return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, true
}
