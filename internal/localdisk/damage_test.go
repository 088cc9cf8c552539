package localdisk

// Helpers that damage real data dirs in controlled places and inspect them.
// Locations are found through etcd's and bbolt's own code (decoder offsets,
// bbolt's mmap), never by re-parsing the formats here.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
)

// garble overwrites n bytes at off with deterministic pseudo-random bytes.
func garble(t testing.TB, path string, off int64, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(off), uint64(n)))
	junk := make([]byte, n)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	overwrite(t, path, off, junk)
}

func overwrite(t testing.TB, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func dbPageSize(t testing.TB, dbPath string) int {
	t.Helper()
	db, err := bolt.Open(dbPath, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return db.Info().PageSize
}

// bucketRootPage finds the page holding the root of a bucket, so a test can
// damage a page the b-tree really uses.
func bucketRootPage(t testing.TB, dbPath, bucket string) uint64 {
	t.Helper()
	db, err := bolt.Open(dbPath, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root uint64
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return fmt.Errorf("no bucket %q", bucket)
		}
		root = uint64(b.Root())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if root == 0 {
		t.Fatalf("precondition: bucket %q is inline; write more keys", bucket)
	}
	return root
}

// keyByteOffset is the file offset of the first byte of the n-th key (from
// 0) in bucket, found through bbolt's own mmap so no format is re-parsed.
func keyByteOffset(t testing.TB, dbPath, bucket string, n int) int64 {
	t.Helper()
	db, err := bolt.Open(dbPath, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var off int64
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return fmt.Errorf("no bucket %q", bucket)
		}
		c := b.Cursor()
		k, _ := c.First()
		for i := 0; i < n && k != nil; i++ {
			k, _ = c.Next()
		}
		if k == nil {
			return fmt.Errorf("bucket %q has fewer than %d keys", bucket, n+1)
		}
		off = int64(uintptr(unsafe.Pointer(unsafe.SliceData(k))) - db.Info().Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return off
}

func onlyWALSegment(t testing.TB, dataDir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dataDir, walRelPath, "*.wal"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("want exactly one WAL segment, got %v (%v)", segs, err)
	}
	return segs[0]
}

// entryRecordSpan returns the byte range of the n-th entry record (from 0)
// in a WAL segment, located with etcd's own decoder.
func entryRecordSpan(t testing.TB, seg string, n int) (start, end int64) {
	t.Helper()
	f, err := os.Open(seg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := wal.NewDecoder(fileutil.NewFileReader(f))
	rec := &walpb.Record{}
	for seen := 0; ; {
		start = dec.LastOffset()
		if err := dec.Decode(rec); err != nil {
			t.Fatalf("only %d entry records in %s: %v", seen, seg, err)
		}
		if rec.Type != wal.EntryType {
			continue
		}
		if seen == n {
			return start, dec.LastOffset()
		}
		seen++
	}
}

// usedLength is the offset just past the last non-zero byte: WAL segments
// are preallocated with zeros.
func usedLength(t testing.TB, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return int64(i + 1)
		}
	}
	t.Fatalf("%s is all zeros", path)
	return 0
}

// fingerprint records every entry's type, mode, size, mtime and content hash.
func fingerprint(t testing.TB, dir string) map[string]string {
	t.Helper()
	fp := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		desc := fmt.Sprintf("%s %d %s", info.Mode(), info.Size(), info.ModTime().Format(time.RFC3339Nano))
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		}
		fp[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fp
}
