package peerseed

// The seed's files: the db placed into the data dir (copied or moved, and
// hashed), and the temp dirs a killed build left.

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// placeDB puts the db at src into the new file dst: a rename when move is
// set and both are on one filesystem, else a copy. It returns dst's size
// and hex sha256, read back from dst either way; progress (nil: none) gets
// each chunk read.
func placeDB(src, dst string, move bool, progress func(int64)) (int64, string, error) {
	if !move {
		return copyFile(src, dst, progress)
	}
	if err := os.Rename(src, dst); err != nil {
		if errors.Is(err, syscall.EXDEV) {
			return copyFile(src, dst, progress)
		}
		return 0, "", fmt.Errorf("move %s to %s: %w", src, dst, err)
	}
	return hashFile(dst, progress)
}

// counted is r, telling progress (nil: none) of each chunk read.
func counted(r io.Reader, progress func(int64)) io.Reader {
	if progress == nil {
		return r
	}
	return &countingReader{r: r, progress: progress}
}

type countingReader struct {
	r        io.Reader
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.progress(int64(n))
	}
	return n, err
}

// hashFile returns the size and hex sha256 of the file at path.
func hashFile(path string, progress func(int64)) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, counted(f, progress), make([]byte, writeBuffer))
	if err != nil {
		return 0, "", fmt.Errorf("hash %s: %w", path, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// copyFile copies src to the new file dst (0600), fsynced, and returns its
// size and hex sha256.
func copyFile(src, dst string, progress func(int64)) (int64, string, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, "", err
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(out, h), counted(in, progress), make([]byte, writeBuffer))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, "", fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// removeSeedTemps removes the temp dirs an earlier, killed BuildDataDir
// for dataDir left behind (only ours: <dataDir>.seed-tmp-*).
func removeSeedTemps(dataDir string) error {
	parent, prefix := filepath.Dir(dataDir), filepath.Base(dataDir)+seedTmpInfix
	entries, err := os.ReadDir(parent)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			if err := os.RemoveAll(filepath.Join(parent, e.Name())); err != nil {
				return fmt.Errorf("remove leftover seed temp dir: %w", err)
			}
		}
	}
	return nil
}
