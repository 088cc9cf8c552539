//go:build linux

package localdisk

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// layoutOK makes the files ClassifyLayout looks at: member/wal with one
// segment and a non-empty member/snap/db.
func layoutOK(t *testing.T, dataDir string) {
	t.Helper()
	for _, d := range []string{walRelPath, snapRelPath} {
		if err := os.MkdirAll(filepath.Join(dataDir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(walRelPath, "0000000000000000-0000000000000000.wal"), dbRelPath} {
		if err := os.WriteFile(filepath.Join(dataDir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// The cached verdict is the one a full check gives, after every change a
// wipe or a repair makes; a listing is reused only while nothing it rests
// on changed, and never one made within a second of a change (a change in
// the same clock tick keeps the mtime).
func TestLayoutCacheFollowsEveryChangeAndListsOnlyAfterOne(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "etcd")
	layoutOK(t, dataDir)
	clock := time.Now()
	c := &LayoutCache{now: func() time.Time { return clock }}
	check := func(what string, want Class, listed bool) {
		t.Helper()
		before := c.listed
		got := c.Classify(DataDirOnly(dataDir), true)
		if full := ClassifyLayout(DataDirOnly(dataDir)); got.Class != full.Class || got.Class != want {
			t.Fatalf("%s: cached %q, full check %q, want %q", what, got.Class, full.Class, want)
		}
		if did := c.listed > before; did != listed {
			t.Fatalf("%s: listed %v, want %v", what, did, listed)
		}
	}
	check("first check", ClassOK, true)
	check("a change within a second: not reused", ClassOK, true)
	clock = clock.Add(2 * time.Second)
	check("settled, first time", ClassOK, true)
	check("nothing changed", ClassOK, false)
	check("nothing changed, again", ClassOK, false)
	if c.Classify(DataDirOnly(dataDir), false); c.listed != 4 {
		t.Fatalf("a check without reuse did not list (%d listings)", c.listed)
	}
	check("nothing changed after a full check", ClassOK, false)

	steps := []struct {
		what   string
		change func()
		want   Class
	}{
		{"the WAL segments removed", func() {
			must(t, os.Remove(filepath.Join(dataDir, walRelPath, "0000000000000000-0000000000000000.wal")))
		}, ClassCorrupt},
		{"repaired", func() { layoutOK(t, dataDir) }, ClassOK},
		{"the db truncated", func() { must(t, os.Truncate(filepath.Join(dataDir, dbRelPath), 0)) }, ClassCorrupt},
		{"repaired", func() { layoutOK(t, dataDir) }, ClassOK},
		{"the db replaced by a directory", func() {
			db := filepath.Join(dataDir, dbRelPath)
			must(t, os.Remove(db))
			must(t, os.Mkdir(db, 0o700))
		}, ClassCorrupt},
		{"repaired", func() {
			must(t, os.Remove(filepath.Join(dataDir, dbRelPath)))
			layoutOK(t, dataDir)
		}, ClassOK},
		{"the data dir wiped", func() { must(t, os.RemoveAll(dataDir)) }, ClassMissing},
		{"the data dir recreated", func() { layoutOK(t, dataDir) }, ClassOK},
		{"the data dir swapped for another", func() {
			other := dataDir + ".new"
			layoutOK(t, other)
			must(t, os.RemoveAll(dataDir))
			must(t, os.Rename(other, dataDir))
		}, ClassOK},
		{"a WAL segment removed, the dir's mtime put back (its ctime moves)", func() {
			wal := filepath.Join(dataDir, walRelPath)
			fi, err := os.Stat(wal)
			must(t, err)
			must(t, os.Remove(filepath.Join(wal, "0000000000000000-0000000000000000.wal")))
			must(t, os.Chtimes(wal, fi.ModTime(), fi.ModTime()))
		}, ClassCorrupt},
		{"repaired", func() { layoutOK(t, dataDir) }, ClassOK},
		{"the member dir emptied", func() {
			must(t, os.RemoveAll(filepath.Join(dataDir, memberDirName)))
			must(t, os.Mkdir(filepath.Join(dataDir, memberDirName), 0o700))
		}, ClassEmpty},
	}
	// Each change is checked as soon as it is settled, with the verdict
	// before it cached: what the key holds must show it.
	for _, s := range steps {
		s.change()
		clock = time.Now().Add(2 * time.Second)
		check(s.what, s.want, true)
		if s.want == ClassOK {
			check(s.what+" (then unchanged)", s.want, false)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
