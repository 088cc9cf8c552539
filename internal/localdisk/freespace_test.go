package localdisk

import (
	"path/filepath"
	"testing"
)

// The data dir and the quarantine on one filesystem (also when neither
// exists yet), and on two: /proc is always another filesystem.
func TestSpaceForTellsOneFilesystemFromTwo(t *testing.T) {
	root := t.TempDir()
	s := SpaceFor(filepath.Join(root, "etcd"), filepath.Join(root, "etcd-agent-quarantine"))
	if s.DataDirOtherFS || s.QuarantineFree == 0 {
		t.Fatalf("one filesystem: %+v", s)
	}
	s = SpaceFor("/proc/etcd-agent-test/data", filepath.Join(root, "q"))
	if !s.DataDirOtherFS || s.QuarantineFree == 0 {
		t.Fatalf("/proc and a temp dir: %+v", s)
	}
}
