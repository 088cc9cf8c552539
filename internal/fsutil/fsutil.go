// Package fsutil holds the two file operations that everything which must
// survive a crash needs: fsync a directory (so that a rename or create in it
// is durable) and write a file atomically (temp file, fsync, rename, fsync of
// the directory: a reader sees the old or the new content, never half).
package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SyncDir fsyncs a directory.
func SyncDir(dir string) error { return syncPath(dir) }

// SyncTree fsyncs every file and directory under root, root included (a
// tree built in a temp dir before it is renamed into place).
func SyncTree(root string) error {
	return filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return syncPath(p)
	})
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return nil
}

// WriteFileAtomic replaces path with data (mode perm): a temp file beside
// it, fsynced, renamed over it, and the dir fsynced.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	_, err := WriteFileAtomicVia(path, filepath.Dir(path), "."+filepath.Base(path)+".tmp-*", data, perm)
	return err
}

// WriteFileAtomicVia writes data to a temp file in tmpDir (named by
// pattern, see os.CreateTemp), fsyncs it and renames it over path, then
// fsyncs path's dir. committed says whether the rename happened: after it,
// path holds data even if an error (a failed dir fsync) is returned. tmpDir
// must be on path's filesystem; otherwise the rename fails with EXDEV and
// nothing is left behind. (A temp dir apart from path's matters where
// path's dir is watched, e.g. a kubelet's manifests dir.)
func WriteFileAtomicVia(path, tmpDir, pattern string, data []byte, perm os.FileMode) (committed bool, err error) {
	f, err := os.CreateTemp(tmpDir, pattern)
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer func() {
		if !committed {
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, err
	}
	return true, SyncDir(filepath.Dir(path))
}

// Exists: path is there (false with no error when it is not; an error
// when it cannot be told).
func Exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
