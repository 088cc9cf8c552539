package localdisk

import (
	"os"
	"path/filepath"
	"testing"
)

// Issue 10 item 4: a mount-point data dir must be seen before the stop.
// Real mount points that exist without root: / and /proc (Linux); a plain
// directory is none. Creating a mount needs root, so the st_dev fallback
// (kernels without statx's STATX_ATTR_MOUNT_ROOT) is tested on the same
// real mounts with statx switched off, and its rule as a table.
func TestIsMountPoint(t *testing.T) {
	plain := t.TempDir()
	if err := os.Mkdir(filepath.Join(plain, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want bool
	}{
		{"/", true},
		{"/proc", true},
		{plain, false},
		{filepath.Join(plain, "data"), false},
		{filepath.Join(plain, "missing"), false},
	} {
		for _, statx := range []bool{true, false} {
			got, err := isMountPoint(c.path, statx)
			if err != nil || got != c.want {
				t.Errorf("isMountPoint(%s, statx=%v) = %v, %v; want %v", c.path, statx, got, err, c.want)
			}
		}
	}
	if got, err := IsMountPoint("/proc"); !got || err != nil {
		t.Errorf("IsMountPoint(/proc) = %v, %v", got, err)
	}
}

func TestMountPointByDevice(t *testing.T) {
	for _, c := range []struct {
		self, parent devIno
		want         bool
	}{
		{devIno{1, 10}, devIno{1, 2}, false}, // a dir on its parent's filesystem
		{devIno{7, 2}, devIno{1, 2}, true},   // another filesystem mounted here
		{devIno{1, 2}, devIno{1, 2}, true},   // the root: its own parent
	} {
		if got := mountPointByDevice(c.self, c.parent); got != c.want {
			t.Errorf("mountPointByDevice(%v, parent %v) = %v, want %v", c.self, c.parent, got, c.want)
		}
	}
}
