package memberruntime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
)

// moveFile renames src to dst (replacing dst) and fsyncs both dirs. Across
// filesystems (EXDEV) it copies src to dst atomically, then removes src:
// a crash in between leaves both copies, never neither.
func moveFile(src, dst string) error {
	err := os.Rename(src, dst)
	if err == nil {
		return errors.Join(fsutil.SyncDir(filepath.Dir(dst)), fsutil.SyncDir(filepath.Dir(src)))
	}
	if !errors.Is(err, syscall.EXDEV) {
		return err
	}
	data, st, err := readWithMode(src)
	if err != nil {
		return err
	}
	if _, err := fsutil.WriteFileAtomicVia(dst, filepath.Dir(dst), "."+filepath.Base(dst)+".*.tmp", data, st); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := os.Remove(src); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(src))
}

// readWithMode reads a file and its permission bits.
func readWithMode(path string) ([]byte, os.FileMode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	data, err := io.ReadAll(f)
	return data, st.Mode().Perm(), err
}

// exists reports whether path exists; errors other than "not found" are
// returned so that a permission problem is not taken for absence.
func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, err
}
