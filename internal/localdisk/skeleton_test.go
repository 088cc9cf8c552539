package localdisk

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// markSkeleton puts the agent's skeleton marker into dataDir's member/.
func markSkeleton(t *testing.T, dataDir string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dataDir, memberDirName), 0o700))
	must(t, os.WriteFile(SkeletonMarker(dataDir), []byte(`{"memberID":"a2"}`), 0o600))
}

// Issue 38: the skeleton the agent makes for a wiped member that still
// serves must never be started on. etcd writes into it by path afterwards
// (.snap files; a defrag or a received snapshot renames a whole db into
// member/snap/db, which the running etcd then holds), and an etcd started
// on it without the gate bootstraps a whole data dir there (a fresh WAL
// under the old member ID). Whatever it holds, a marked dir is corrupt,
// confirmed (never in-use, which counts as usable; never ok or empty).
func TestAMarkedSkeletonIsCorruptWhateverEtcdWroteIntoIt(t *testing.T) {
	cases := map[string]func(t *testing.T) Dirs{
		"as made: member/, snap and wal empty": func(t *testing.T) Dirs {
			d := filepath.Join(t.TempDir(), "data")
			for _, p := range []string{snapRelPath, walRelPath} {
				must(t, os.MkdirAll(filepath.Join(d, p), 0o700))
			}
			markSkeleton(t, d)
			return DataDirOnly(d)
		},
		"with .snap files and a db (a defrag renamed one in)": func(t *testing.T) Dirs {
			g := copyOfGolden(t)
			must(t, os.RemoveAll(filepath.Join(g.dataDir, walRelPath)))
			must(t, os.Mkdir(filepath.Join(g.dataDir, walRelPath), 0o700))
			markSkeleton(t, g.dataDir)
			return DataDirOnly(g.dataDir)
		},
		"that db held by the running etcd (its flock)": func(t *testing.T) Dirs {
			g := copyOfGolden(t)
			must(t, os.RemoveAll(filepath.Join(g.dataDir, walRelPath)))
			markSkeleton(t, g.dataDir)
			f, err := os.Open(filepath.Join(g.dataDir, dbRelPath))
			must(t, err)
			t.Cleanup(func() { f.Close() })
			must(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))
			return DataDirOnly(g.dataDir)
		},
		"a whole data dir (etcd started on it without the gate)": func(t *testing.T) Dirs {
			g := copyOfGolden(t)
			markSkeleton(t, g.dataDir)
			return DataDirOnly(g.dataDir)
		},
		"with --wal-dir, the WAL dir holding a whole WAL": func(t *testing.T) Dirs {
			m, d := withDedicatedWAL(t)
			markSkeleton(t, m.dataDir)
			return d
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			d := build(t)
			requireClass(t, ClassifyLayout(d), ClassCorrupt, "skeleton", SkeletonMarker(d.Data))
			r := classifyDirsNow(t, d, Expect{})
			requireClass(t, r, ClassCorrupt, "skeleton", "never started on")
			if !r.Verified {
				t.Fatal("a marked skeleton's corrupt is not confirmed: a stopped member would not be lost at once")
			}
		})
	}
}

// The agent makes exactly the parts it is told, marker before the dirs the
// purge lists, and never removes or rewrites anything that is there.
func TestRestoreSkeletonMakesOnlyTheMissingPartsMarked(t *testing.T) {
	root := t.TempDir()
	d := Dirs{Data: filepath.Join(root, "data"), WAL: filepath.Join(root, "wal-disk", "wal")}
	must(t, os.MkdirAll(filepath.Dir(d.WAL), 0o700))
	l := LookSkeleton(d)
	if l.DataDir || l.MemberDir || l.SnapDir || l.WALDir || l.DB || l.Marked || !l.DataDirParent || !l.WALDirParent || l.Err != nil {
		t.Fatalf("LookSkeleton of a wiped member = %+v", l)
	}
	made, err := RestoreSkeleton(d, SkeletonMake{DataDir: true, MemberDir: true, Marker: true, SnapDir: true, WALDir: true},
		SkeletonMark{MadeAt: time.Now().UTC().Format(time.RFC3339), Member: "m2", MemberID: "a2", Why: "test"})
	must(t, err)
	p := SkeletonPartsOf(d)
	if want := []string{p.DataDir, p.MemberDir, p.Marker, p.SnapDir, p.WALDir}; !slices.Equal(made, want) {
		t.Fatalf("made %v, want %v in that order", made, want)
	}
	for _, dir := range []string{p.DataDir, p.MemberDir, p.SnapDir, p.WALDir} {
		fi, err := os.Stat(dir)
		must(t, err)
		if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: mode %s, want a dir 0700", dir, fi.Mode())
		}
	}
	var m SkeletonMark
	b, err := os.ReadFile(p.Marker)
	must(t, err)
	must(t, json.Unmarshal(b, &m))
	if m.MemberID != "a2" || !slices.Equal(m.Made, []string{p.DataDir, p.MemberDir, p.Marker, p.SnapDir, p.WALDir}) {
		t.Fatalf("marker says %+v", m)
	}
	if l := LookSkeleton(d); !(l.DataDir && l.MemberDir && l.SnapDir && l.WALDir && l.Marked) || l.DB {
		t.Fatalf("LookSkeleton after the restore = %+v", l)
	}
	requireClass(t, classifyDirsNow(t, d, Expect{}), ClassCorrupt, "skeleton")

	// Wiped again, but for member/snap's contents: nothing that is there
	// is made again, rewritten or removed.
	kept := filepath.Join(p.SnapDir, "0000000000000002-0000000000000065.snap")
	must(t, os.WriteFile(kept, []byte("etcd's"), 0o600))
	must(t, os.WriteFile(p.Marker, []byte("the marker as it was"), 0o600))
	made, err = RestoreSkeleton(d, SkeletonMake{MemberDir: true, Marker: true, SnapDir: true, WALDir: true}, SkeletonMark{MemberID: "a2"})
	must(t, err)
	if len(made) != 0 {
		t.Fatalf("made %v over parts that were there", made)
	}
	for path, want := range map[string]string{kept: "etcd's", p.Marker: "the marker as it was"} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Fatalf("%s: %q (%v), want %q kept", path, b, err, want)
		}
	}
}

// The shape of a wipe as LookSkeleton reports it, while a real etcd runs
// from its open files; and what that etcd writes into the skeleton by path
// afterwards (a snapshot's .snap, a defrag's db) leaves it corrupt, also
// once etcd is stopped.
func TestASkeletonUnderARealRunningEtcd(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startEtcd(t, dataDir, "wiped")
	p.writeKeys(t, 30)
	must(t, os.RemoveAll(filepath.Join(dataDir, memberDirName)))
	d := DataDirOnly(dataDir)
	if l := LookSkeleton(d); !l.DataDir || l.MemberDir || l.SnapDir || l.WALDir || l.DB || l.Marked || l.Err != nil {
		t.Fatalf("LookSkeleton of a wiped member/ = %+v", l)
	}
	_, err := RestoreSkeleton(d, SkeletonMake{MemberDir: true, Marker: true, SnapDir: true, WALDir: true}, SkeletonMark{MemberID: "test"})
	must(t, err)
	p.writeKeys(t, 60) // --snapshot-count 25: .snap files by path
	cli := p.client()
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cli.Defragment(ctx, p.Endpoint); err != nil {
		t.Fatalf("defrag: %v", err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dataDir, snapRelPath, "*.snap"))
	if l := LookSkeleton(d); !l.DB || len(snaps) == 0 {
		t.Fatalf("etcd wrote no db (defrag) or .snap (%v) into the skeleton: %+v", snaps, l)
	}
	if !dbLocked(filepath.Join(dataDir, dbRelPath)) {
		t.Fatal("the running etcd does not hold the defragmented db in the skeleton")
	}
	requireClass(t, classifyNow(t, dataDir, Expect{}), ClassCorrupt, "skeleton")
	if _, err := cli.Get(ctx, "/test/key-0001"); err != nil {
		t.Fatalf("the member no longer serves: %v", err)
	}
	p.stop(t)
	requireClass(t, classifyNow(t, dataDir, Expect{}), ClassCorrupt, "skeleton")
}

// Review (session 26): a file (or a dangling link) where a skeleton dir
// goes counted as made: "restored" was logged, an Event sent and counted at
// every observation while nothing was made. It is an error.
func TestASkeletonPartThatIsAFileIsNotMade(t *testing.T) {
	data := filepath.Join(t.TempDir(), "etcd")
	if err := os.MkdirAll(filepath.Join(data, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "member", "snap"), []byte("not a dir"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreSkeleton(DataDirOnly(data), SkeletonMake{SnapDir: true}, SkeletonMark{}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("RestoreSkeleton over a file: %v, want an error", err)
	}
}
