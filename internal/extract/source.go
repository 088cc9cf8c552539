package extract

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// dbRelPath is where etcd keeps its bbolt db inside a data dir.
const dbRelPath = "member/snap/db"

// copyAttempts bounds how often a torn copy of a live member's db is taken
// again before giving up.
const copyAttempts = 5

// copyRetryPause is the pause before copy attempt n+1 is n times this: a
// commit in progress is usually over within a few hundred milliseconds.
const copyRetryPause = 200 * time.Millisecond

// Source says where the db comes from: exactly one of the two is set.
type Source struct {
	// DataDir is an etcd data dir; its member/snap/db is copied, never opened.
	DataDir string
	// Snapshot is a file written by `etcdctl snapshot save`, opened directly.
	Snapshot string
}

// Validate says what is wrong with the choice of source, if anything.
func (s Source) Validate() error {
	switch {
	case s.DataDir == "" && s.Snapshot == "":
		return errors.New("no source: give exactly one of --data-dir or --snapshot")
	case s.DataDir != "" && s.Snapshot != "":
		return errors.New("--data-dir and --snapshot both given: give exactly one")
	}
	return nil
}

// DB is an opened, consistency-checked etcd db (the private copy of a data
// dir's db, or the snapshot file itself).
type DB struct {
	bolt *bolt.DB
	// path is what errors name: the source, not our copy.
	path string
	// tmpDir holds the private copy; removed by Close.
	tmpDir string
}

// Path is the source file this DB was read from.
func (db *DB) Path() string { return db.path }

// Close closes the db and removes the private copy, if any.
func (db *DB) Close() error {
	err := db.bolt.Close()
	if db.tmpDir != "" {
		if rerr := os.RemoveAll(db.tmpDir); err == nil {
			err = rerr
		}
	}
	return err
}

// unreadable is the one wording of "this is not an etcd db we can read".
func unreadable(path string, err error) error {
	return fmt.Errorf("%s: not a readable etcd db: %w", path, err)
}

// Open opens and checks the source's db. Notes for the user (retries, the
// snapshot's hash) go to log.
func Open(ctx context.Context, src Source, log io.Writer) (*DB, error) {
	if err := src.Validate(); err != nil {
		return nil, err
	}
	if src.Snapshot != "" {
		return openSnapshot(ctx, src.Snapshot, log)
	}
	if err := refuseTempDirInside(src.DataDir); err != nil {
		return nil, err
	}
	return openDataDirCopy(ctx, filepath.Join(src.DataDir, dbRelPath), log)
}

// refuseTempDirInside keeps the promise of never writing into the data dir
// when $TMPDIR happens to point into it.
func refuseTempDirInside(dataDir string) error {
	dd, err1 := filepath.Abs(dataDir)
	tmp, err2 := filepath.Abs(os.TempDir())
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if rel, err := filepath.Rel(dd, tmp); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return fmt.Errorf("the temp dir %s is inside the data dir %s, where the copy must not go: set TMPDIR elsewhere", tmp, dd)
	}
	return nil
}

// openSnapshot opens the user's snapshot file in place: no etcd runs on it,
// so bbolt's read-only open (shared flock) is harmless.
func openSnapshot(ctx context.Context, path string, log io.Writer) (*DB, error) {
	if err := requireRegularFile(path); err != nil {
		return nil, err
	}
	if err := checkInChild(ctx, path); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err() // interrupted: no verdict on the file
		}
		return nil, unreadable(path, err)
	}
	db, err := openChecked(path, path)
	if err != nil {
		return nil, err
	}
	reportSnapshotHash(db, log)
	return db, nil
}

// openDataDirCopy copies a (maybe live) member's db and opens the copy,
// taking the copy again while it comes out torn.
func openDataDirCopy(ctx context.Context, src string, log io.Writer) (*DB, error) {
	if err := requireRegularFile(src); err != nil {
		return nil, err
	}
	// MkdirTemp makes the dir 0700: the copy holds the cluster's secrets.
	tmpDir, err := os.MkdirTemp(os.TempDir(), "etcd-agent-extract-")
	if err != nil {
		return nil, fmt.Errorf("temp dir for the copy of %s: %w", src, err)
	}
	db, err := copyUntilConsistent(ctx, src, filepath.Join(tmpDir, "db"), log)
	if err != nil {
		os.RemoveAll(tmpDir)
		return nil, err
	}
	db.tmpDir = tmpDir
	return db, nil
}

func copyUntilConsistent(ctx context.Context, src, dst string, log io.Writer) (*DB, error) {
	var problem error
	first, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	for attempt := 1; attempt <= copyAttempts; attempt++ {
		if attempt > 2 && unchangedSince(src, first) {
			// Every commit rewrites the file (and its mtime); two bad copies
			// of a file that never changed mean the file itself is bad. This
			// spares the last copies of a damaged multi-GB db.
			return nil, unreadable(src, fmt.Errorf("damaged: %d copies failed the check and the file did not change meanwhile, last: %w",
				attempt-1, problem))
		}
		if attempt > 1 {
			fmt.Fprintf(log, "extract: copy %d of %d of %s is not consistent (%v); etcd may have been committing, copying again\n",
				attempt-1, copyAttempts, src, problem)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(attempt-1) * copyRetryPause):
			}
		}
		if err := copyDBFile(ctx, src, dst); err != nil {
			return nil, fmt.Errorf("copy %s: %w", src, err)
		}
		problem = checkInChild(ctx, dst)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if problem == nil {
			return openChecked(dst, src)
		}
	}
	return nil, unreadable(src, fmt.Errorf("no consistent copy in %d attempts (the file is damaged, or etcd commits faster than it can be copied), last: %w",
		copyAttempts, problem))
}

// unchangedSince reports whether path still has the size and mtime it had.
func unchangedSince(path string, then os.FileInfo) bool {
	now, err := os.Stat(path)
	return err == nil && now.Size() == then.Size() && now.ModTime().Equal(then.ModTime())
}

// copyDBFile is a variable so a test can tear a copy.
var copyDBFile = copyFile

// copyFile copies src to a new dst with plain sequential reads: no flock,
// no mmap, nothing a running etcd could notice.
func copyFile(ctx context.Context, src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, ctxReader{ctx: ctx, r: in})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// ctxReader lets Ctrl-C interrupt the copy of a multi-GB db.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func requireRegularFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s: not a regular file (mode %s)", path, fi.Mode())
	case fi.Size() == 0:
		return unreadable(path, errors.New("empty file (0 bytes)"))
	}
	return nil
}

// openChecked opens a file the child found consistent. Reading it in this
// process is then safe; readGuarded still catches anything unforeseen.
func openChecked(path, sourceName string) (db *DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, unreadable(sourceName, fmt.Errorf("panic: %v", p))
		}
	}()
	b, err := openBolt(path)
	if err != nil {
		return nil, unreadable(sourceName, err)
	}
	return &DB{bolt: b, path: sourceName}, nil
}
