package extract

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The data dir's db is read while etcd's backend holds it open for writing
// (and holds its exclusive flock): it works, and the file is untouched.
func TestDataDirIsReadThroughAPrivateCopyWithoutTouchingOrLockingTheSource(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where os.TempDir, and so the copy, goes
	f := newFixture(t)
	src := f.db.path()
	before, beforeInfo := readFileAndInfo(t, src)

	// The source is locked: opening it (as --snapshot does) must fail, so
	// the data-dir mode working below shows it never opened the source.
	if _, err := Open(context.Background(), Source{Snapshot: src}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("opening the live db in place: %v; want a lock timeout", err)
	}

	var log bytes.Buffer
	db, err := Open(context.Background(), Source{DataDir: f.db.dataDir}, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	copies, _ := filepath.Glob(filepath.Join(tmp, "etcd-agent-extract-*", "db"))
	if len(copies) != 1 {
		t.Errorf("want one private copy under TMPDIR, found %v", copies)
	} else if fi, err := os.Stat(filepath.Dir(copies[0])); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("copy dir: %v, mode %v; want 0700 (it holds secrets)", err, fi.Mode())
	}
	c, err := db.Read(func(string) bool { return true })
	if err != nil || len(c.KVs) != 7 { // 6 under /registry/ and compact_rev_key
		t.Fatalf("read: %v, %d keys", err, len(c.KVs))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "etcd-agent-extract-*")); len(left) != 0 {
		t.Errorf("the copy was not removed: %v", left)
	}
	after, afterInfo := readFileAndInfo(t, src)
	if !bytes.Equal(before, after) || !afterInfo.ModTime().Equal(beforeInfo.ModTime()) || afterInfo.Mode() != beforeInfo.Mode() {
		t.Errorf("the source changed: %d -> %d bytes, mtime %v -> %v", len(before), len(after), beforeInfo.ModTime(), afterInfo.ModTime())
	}
}

func readFileAndInfo(t *testing.T, path string) ([]byte, os.FileInfo) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return b, fi
}

// validDB returns the bytes of a real etcd db (written and closed) and how
// many of them its pages use: etcd grows the file ahead of its pages.
func validDB(t *testing.T) (content []byte, used int) {
	t.Helper()
	f := newFixture(t)
	f.db.close()
	b, err := os.ReadFile(f.db.path())
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(f.db.path(), 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error { used = int(tx.Size()); return nil })
	return b, used
}

func TestDamagedFilesGiveAClearErrorNotACrash(t *testing.T) {
	good, used := validDB(t)
	garbage := make([]byte, 64<<10)
	rand.Read(garbage)
	pageSize := os.Getpagesize()
	scrambled := bytes.Clone(good) // meta pages intact, every other page garbage
	rand.Read(scrambled[2*pageSize:])
	emptyBolt := filepath.Join(t.TempDir(), "plain.db") // a bbolt file, but not etcd's
	b, err := bolt.Open(emptyBolt, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
	b.Close()
	notEtcd, _ := os.ReadFile(emptyBolt)

	for _, tc := range []struct {
		name    string
		content []byte
		want    string
	}{
		{"garbage", garbage, "not a readable etcd db"},
		{"truncated", good[:used/2], "truncated"},
		{"scrambled pages", scrambled, "not a readable etcd db"},
		{"empty", nil, "empty file"},
		{"bbolt but not etcd", notEtcd, `no "key" bucket`},
	} {
		for _, mode := range []string{"snapshot", "data-dir"} {
			dir := t.TempDir()
			path := filepath.Join(dir, dbRelPath)
			os.MkdirAll(filepath.Dir(path), 0o700)
			if err := os.WriteFile(path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			src := Source{Snapshot: path}
			if mode == "data-dir" {
				src = Source{DataDir: dir}
			}
			err := openAndRead(src)
			t.Logf("%s as %s: %v", tc.name, mode, err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s as %s: got %v, want an error naming %s and saying %q", tc.name, mode, err, path, tc.want)
			}
		}
	}
}

func openAndRead(src Source) error {
	db, err := Open(context.Background(), src, &bytes.Buffer{})
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Read(func(string) bool { return true })
	return err
}

func TestATornCopyIsTakenAgainAndAlwaysTornFailsClearly(t *testing.T) {
	f := newFixture(t)
	tears, commitWhileCopying := 1, false
	copyDBFile = func(ctx context.Context, src, dst string) error {
		if commitWhileCopying { // the live member commits meanwhile
			f.db.put("/registry/configmaps/default/busy", []byte("{}"))
		}
		if err := copyFile(ctx, src, dst); err != nil {
			return err
		}
		if tears == 0 {
			return nil
		}
		tears--
		b, _ := os.ReadFile(dst)
		rand.Read(b[2*os.Getpagesize():]) // as if etcd rewrote pages mid-copy
		return os.WriteFile(dst, b, 0o600)
	}
	defer func() { copyDBFile = copyFile }()

	var log bytes.Buffer
	db, err := Open(context.Background(), Source{DataDir: f.db.dataDir}, &log)
	if err != nil {
		t.Fatalf("one torn copy: %v\n%s", err, log.String())
	}
	db.Close()
	if !strings.Contains(log.String(), "copy 1 of 5 of "+f.db.path()+" is not consistent") {
		t.Errorf("the retry is not reported:\n%s", log.String())
	}

	tears, commitWhileCopying = copyAttempts, true
	log.Reset()
	_, err = Open(context.Background(), Source{DataDir: f.db.dataDir}, &log)
	if err == nil || !strings.Contains(err.Error(), "not a readable etcd db: no consistent copy in 5 attempts") {
		t.Fatalf("always torn while etcd commits: %v", err)
	}
	if n := strings.Count(log.String(), "is not consistent"); n != copyAttempts-1 {
		t.Errorf("%d retries reported, want %d:\n%s", n, copyAttempts-1, log.String())
	}

	// A file that fails the check twice without changing is damaged: no
	// point in copying it three more times.
	tears, commitWhileCopying = copyAttempts, false
	log.Reset()
	_, err = Open(context.Background(), Source{DataDir: f.db.dataDir}, &log)
	if err == nil || !strings.Contains(err.Error(), "not a readable etcd db: damaged: 2 copies failed the check and the file did not change") {
		t.Fatalf("always torn, idle source: %v", err)
	}
}

func TestSourceChoiceIsValidated(t *testing.T) {
	for _, src := range []Source{{}, {DataDir: "d", Snapshot: "s"}} {
		if _, err := Open(context.Background(), src, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "exactly one of --data-dir or --snapshot") &&
			!strings.Contains(err.Error(), "give exactly one") {
			t.Errorf("%+v: %v", src, err)
		}
	}
	if _, err := Open(context.Background(), Source{DataDir: t.TempDir()}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "member/snap/db") {
		t.Errorf("data dir without a db: %v", err)
	}
	dataDir := t.TempDir()
	t.Setenv("TMPDIR", filepath.Join(dataDir, "tmp"))
	if _, err := Open(context.Background(), Source{DataDir: dataDir}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "is inside the data dir") {
		t.Errorf("TMPDIR inside the data dir: %v", err)
	}
}
