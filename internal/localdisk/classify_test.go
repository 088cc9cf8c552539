package localdisk

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func classifyNow(t testing.TB, dataDir string, expect Expect) Result {
	t.Helper()
	return classifyDirsNow(t, DataDirOnly(dataDir), expect)
}

func classifyDirsNow(t testing.TB, d Dirs, expect Expect) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Classify(ctx, d, expect)
}

func requireClass(t testing.TB, r Result, want Class, detailParts ...string) {
	t.Helper()
	t.Logf("%s: %s", r.Class, r.Detail)
	if r.Class != want {
		t.Fatalf("class = %q, want %q (detail: %s)", r.Class, want, r.Detail)
	}
	for _, part := range detailParts {
		if !strings.Contains(r.Detail, part) {
			t.Fatalf("detail %q does not mention %q", r.Detail, part)
		}
	}
}

func TestClassifyReportsOKWithIdentityOfStoppedMember(t *testing.T) {
	onEtcdBinaries(t, classifyReportsOKWithIdentityOfStoppedMember)
}

func classifyReportsOKWithIdentityOfStoppedMember(t *testing.T, bin string) {
	m := copyOfGoldenOf(t, bin)

	for _, expect := range []Expect{{}, {MemberID: m.id.memberID, ClusterID: m.id.clusterID}} {
		r := classifyNow(t, m.dataDir, expect)
		requireClass(t, r, ClassOK)
		if r.MemberID != m.id.memberID || r.ClusterID != m.id.clusterID {
			t.Fatalf("IDs from WAL = member %x cluster %x, etcd API said member %x cluster %x",
				r.MemberID, r.ClusterID, m.id.memberID, m.id.clusterID)
		}
		if r.ConsistentIndex == 0 || r.ConsistentIndex < m.id.appliedIndex {
			t.Fatalf("consistent index %d, want >= applied index %d reported before stop", r.ConsistentIndex, m.id.appliedIndex)
		}
	}

	// The golden member snapshots every 25 entries, so the WAL must have been
	// read from a real .snap rather than from its start.
	ws, err := readWAL(m.dataDir, DataDirOnly(m.dataDir).WALDir())
	if err != nil {
		t.Fatal(err)
	}
	if ws.start.Index == 0 {
		t.Fatal("WAL was read from index 0; expected to start at the newest snapshot")
	}
}

func TestClassifyReportsInUseWhileMemberRuns(t *testing.T) {
	onEtcdBinaries(t, classifyReportsInUseWhileMemberRuns)
}

func classifyReportsInUseWhileMemberRuns(t *testing.T, bin string) {
	dataDir := filepath.Join(t.TempDir(), "data")
	p := startEtcdWith(t, bin, dataDir, "running")
	p.writeKeys(t, 5)
	id := p.identity(t)

	r := classifyNow(t, dataDir, Expect{})
	requireClass(t, r, ClassInUse, filepath.Join(dataDir, dbRelPath))
	if r.MemberID != id.memberID || r.ClusterID != id.clusterID {
		t.Fatalf("in-use IDs = member %x cluster %x, want member %x cluster %x", r.MemberID, r.ClusterID, id.memberID, id.clusterID)
	}

	t.Run("layout check sees an ok layout", func(t *testing.T) {
		requireClass(t, ClassifyLayout(DataDirOnly(dataDir)), ClassOK)
	})

	t.Run("a short deadline still yields in-use promptly", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		start := time.Now()
		requireClass(t, Classify(ctx, DataDirOnly(dataDir), Expect{}), ClassInUse)
		if elapsed := time.Since(start); elapsed > time.Second {
			t.Fatalf("Classify took %s with a 150ms deadline", elapsed)
		}
	})

	// Classifying must not have disturbed the member.
	p.writeKeys(t, 1)
	p.stop(t)
	requireClass(t, classifyNow(t, dataDir, Expect{MemberID: id.memberID, ClusterID: id.clusterID}), ClassOK)
}

func TestClassifyReportsMissingForAbsentDataDir(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "never-created")
	requireClass(t, classifyNow(t, dataDir, Expect{}), ClassMissing, dataDir)
	requireClass(t, ClassifyLayout(DataDirOnly(dataDir)), ClassMissing)
}

func TestClassifyReportsEmptyWhenNoMemberData(t *testing.T) {
	cases := map[string]func(dir string) error{
		"no entries": func(string) error { return nil },
		"only an empty member dir": func(dir string) error {
			return os.Mkdir(filepath.Join(dir, memberDirName), 0o700)
		},
		// Review (helper 4): a volume root holds its quarantine beside an
		// empty member/ a learner left; etcd starts a new member there.
		"an empty member dir beside other entries": func(dir string) error {
			if err := os.Mkdir(filepath.Join(dir, memberDirName), 0o700); err != nil {
				return err
			}
			return os.Mkdir(filepath.Join(dir, VolumeQuarantineDirName), 0o700)
		},
		"unrelated entries but no member dir": func(dir string) error {
			return os.Mkdir(filepath.Join(dir, "lost+found"), 0o700)
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := setup(dir); err != nil {
				t.Fatal(err)
			}
			requireClass(t, ClassifyLayout(DataDirOnly(dir)), ClassEmpty)
			requireClass(t, classifyNow(t, dir, Expect{}), ClassEmpty)
		})
	}
	// A real member's data wiped while its etcd runs on from open files (the
	// heal's wipe scenario), on each etcd minor.
	t.Run("member dir wiped under a running etcd", func(t *testing.T) {
		onEtcdBinaries(t, func(t *testing.T, bin string) {
			dataDir := filepath.Join(t.TempDir(), "data")
			p := startEtcdWith(t, bin, dataDir, "wiped")
			p.writeKeys(t, 30)
			must(t, os.RemoveAll(filepath.Join(dataDir, memberDirName)))
			requireClass(t, ClassifyLayout(DataDirOnly(dataDir)), ClassEmpty)
			requireClass(t, classifyNow(t, dataDir, Expect{}), ClassEmpty)
		})
	})
}

func TestClassifyReportsCorruptWhenLayoutIsBroken(t *testing.T) {
	cases := map[string]struct {
		damage  func(dataDir string) error
		mention string
	}{
		"member/wal removed": {
			damage:  func(d string) error { return os.RemoveAll(filepath.Join(d, walRelPath)) },
			mention: walRelPath,
		},
		"member/wal has no segments": {
			damage: func(d string) error {
				segs, err := filepath.Glob(filepath.Join(d, walRelPath, "*.wal"))
				for _, s := range segs {
					err = os.Remove(s)
				}
				return err
			},
			mention: "no .wal files",
		},
		"member/snap/db removed": {
			damage:  func(d string) error { return os.Remove(filepath.Join(d, dbRelPath)) },
			mention: dbRelPath,
		},
		"member/snap/db is zero bytes": {
			damage:  func(d string) error { return os.Truncate(filepath.Join(d, dbRelPath), 0) },
			mention: "0 bytes",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := copyOfGolden(t)
			if err := tc.damage(m.dataDir); err != nil {
				t.Fatal(err)
			}
			requireClass(t, ClassifyLayout(DataDirOnly(m.dataDir)), ClassCorrupt, tc.mention)
			requireClass(t, classifyNow(t, m.dataDir, Expect{}), ClassCorrupt, tc.mention)
		})
	}
}

// Issue 38: a data dir replaced by a file is a class of its own, not
// corrupt: it holds no member data, and no db lock tells whether etcd runs.
func TestClassifyReportsNotADirectoryWhenDataDirIsAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	requireClass(t, ClassifyLayout(DataDirOnly(path)), ClassNotADirectory, path, "not a directory")
	r := classifyNow(t, path, Expect{})
	requireClass(t, r, ClassNotADirectory, path, "not a directory")
	if !r.Verified {
		t.Fatal("not verified: the path's type is the whole answer, no deep check can add to it")
	}
}

func TestClassifyReportsCorruptWhenDBMetaPagesGarbled(t *testing.T) {
	m := copyOfGolden(t)
	dbPath := filepath.Join(m.dataDir, dbRelPath)
	pageSize := dbPageSize(t, dbPath)
	// bbolt keeps two meta pages (0 and 1) and falls back to the other when
	// one is bad, so both must go.
	garble(t, dbPath, 0, 2*pageSize)

	if db, err := bolt.Open(dbPath, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second}); err == nil {
		db.Close()
		t.Fatal("precondition: bbolt still opens the db after garbling both meta pages")
	}
	requireClass(t, classifyNow(t, m.dataDir, Expect{}), ClassCorrupt, "open "+dbPath)
}

func TestClassifyReportsCorruptWhenDBBTreePageGarbled(t *testing.T) {
	m := copyOfGolden(t)
	dbPath := filepath.Join(m.dataDir, dbRelPath)
	pageSize := dbPageSize(t, dbPath)
	root := bucketRootPage(t, dbPath, "key")
	garble(t, dbPath, int64(root)*int64(pageSize), pageSize)

	// Open only reads meta and freelist pages, so this damage is invisible
	// to it: detection must come from walking the tree / tx.Check, and the
	// bbolt panic on the bad page must not kill the process.
	db, err := bolt.Open(dbPath, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatalf("precondition: expected bbolt to open the db despite a garbled b-tree page: %v", err)
	}
	db.Close()

	r := classifyNow(t, m.dataDir, Expect{})
	requireClass(t, r, ClassCorrupt, dbPath)
	if r.MemberID != m.id.memberID {
		t.Fatalf("corrupt db result lost WAL identity: member %x, want %x (detail: %s)", r.MemberID, m.id.memberID, r.Detail)
	}
}

func TestClassifyReportsCorruptWhenBboltPanicsOnBrokenKeyOrder(t *testing.T) {
	m := copyOfGolden(t)
	dbPath := filepath.Join(m.dataDir, dbRelPath)
	// Raise the top byte of a key so it sorts after its right-hand
	// neighbours while every page header stays intact. etcd's dbs have no
	// synced freelist, so bbolt rebuilds it by walking the tree and panics on
	// this from a goroutine of its own: in-process it would kill the test.
	off := keyByteOffset(t, dbPath, "key", 2)
	overwrite(t, dbPath, off, []byte{0xf1})

	r := classifyNow(t, m.dataDir, Expect{})
	requireClass(t, r, ClassCorrupt, "check "+dbPath, "crashed")
	if r.MemberID != m.id.memberID || r.ClusterID != m.id.clusterID {
		t.Fatalf("crash result lost WAL identity: %x/%x, want %x/%x", r.MemberID, r.ClusterID, m.id.memberID, m.id.clusterID)
	}
}

func TestClassifyReportsCorruptWhenWALDamaged(t *testing.T) {
	cases := map[string]struct {
		damage func(t *testing.T, seg string)
		// What the detail must say: damage the decoder rejects outright
		// shows as a WAL error; damage it takes for a torn tail (read mode
		// tolerates that, as etcd does) shows as WAL entries missing that the
		// db already applied.
		mention string
	}{
		"one byte of an entry's payload flipped": {
			damage: func(t *testing.T, seg string) {
				start, end := entryRecordSpan(t, seg, 50)
				overwrite(t, seg, (start+end)/2, []byte{0xff})
			},
			mention: "crc mismatch",
		},
		// Depending on where record boundaries fall, this reads either as a
		// CRC failure or as a torn tail; both must end up corrupt.
		"garbage over record frames mid-segment": {
			damage: func(t *testing.T, seg string) {
				garble(t, seg, usedLength(t, seg)/2, 256)
			},
			mention: walRelPath,
		},
		"segment truncated to 60% of its records": {
			damage: func(t *testing.T, seg string) {
				if err := os.Truncate(seg, usedLength(t, seg)*6/10); err != nil {
					t.Fatal(err)
				}
			},
			mention: "WAL entries are missing",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := copyOfGolden(t)
			tc.damage(t, onlyWALSegment(t, m.dataDir))
			requireClass(t, classifyNow(t, m.dataDir, Expect{}), ClassCorrupt, walRelPath, tc.mention)
		})
	}
}

func TestClassifyReportsForeignForAnotherClustersDataDir(t *testing.T) {
	onEtcdBinaries(t, classifyReportsForeignForAnotherClustersDataDir)
}

func classifyReportsForeignForAnotherClustersDataDir(t *testing.T, bin string) {
	ours := goldenMemberOf(t, bin)
	theirs := makeStoppedMemberWith(t, bin, t.TempDir(), "other")
	if theirs.id.memberID == ours.id.memberID || theirs.id.clusterID == ours.id.clusterID {
		t.Fatalf("precondition: two clusters share IDs: %+v vs %+v", theirs.id, ours.id)
	}

	cases := map[string]struct {
		expect   Expect
		mentions []string
	}{
		"member ID differs": {
			expect:   Expect{MemberID: ours.id.memberID},
			mentions: []string{hexID(theirs.id.memberID), hexID(ours.id.memberID)},
		},
		"cluster ID differs": {
			expect:   Expect{ClusterID: ours.id.clusterID},
			mentions: []string{hexID(theirs.id.clusterID), hexID(ours.id.clusterID)},
		},
		"both differ": {
			expect:   Expect{MemberID: ours.id.memberID, ClusterID: ours.id.clusterID},
			mentions: []string{"member " + hexID(theirs.id.memberID), "cluster " + hexID(theirs.id.clusterID)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := classifyNow(t, theirs.dataDir, tc.expect)
			requireClass(t, r, ClassForeign, tc.mentions...)
			if r.MemberID != theirs.id.memberID || r.ClusterID != theirs.id.clusterID {
				t.Fatalf("foreign result IDs = %x/%x, want the found ones %x/%x", r.MemberID, r.ClusterID, theirs.id.memberID, theirs.id.clusterID)
			}
		})
	}

	t.Run("its own identity is ok", func(t *testing.T) {
		requireClass(t, classifyNow(t, theirs.dataDir, Expect{MemberID: theirs.id.memberID, ClusterID: theirs.id.clusterID}), ClassOK)
	})
}

func TestClassifyDoesNotModifyDataDir(t *testing.T) {
	cases := map[string]struct {
		damage func(t *testing.T, dataDir string)
		want   Class
	}{
		// Snapshotter.Load* would rename this file to .broken.
		"unreadable newest .snap file": {
			damage: func(t *testing.T, d string) {
				snaps, _ := filepath.Glob(filepath.Join(d, snapRelPath, "*.snap"))
				if len(snaps) == 0 {
					t.Fatal("precondition: golden member has no .snap files")
				}
				slices.Sort(snaps)
				garble(t, snaps[len(snaps)-1], 0, 64)
			},
			want: ClassOK,
		},
		// A WAL opened for writing would zero or repair its tail.
		"garbled WAL": {
			damage: func(t *testing.T, d string) {
				seg := onlyWALSegment(t, d)
				garble(t, seg, usedLength(t, seg)/2, 256)
			},
			want: ClassCorrupt,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := copyOfGolden(t)
			tc.damage(t, m.dataDir)
			before := fingerprint(t, m.dataDir)

			requireClass(t, classifyNow(t, m.dataDir, Expect{}), tc.want)

			after := fingerprint(t, m.dataDir)
			if !maps.Equal(before, after) {
				t.Fatalf("data dir changed:\nbefore: %v\nafter:  %v", before, after)
			}
		})
	}
}

func TestClassifyFallsBackToLayoutWhenContextAlreadyDone(t *testing.T) {
	m := copyOfGolden(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	requireClass(t, Classify(ctx, DataDirOnly(m.dataDir), Expect{}), ClassOK, "deep check not finished", context.Canceled.Error())
}

func TestAllClassesListsEachClassOnce(t *testing.T) {
	want := []Class{ClassOK, ClassMissing, ClassEmpty, ClassCorrupt, ClassForeign, ClassInUse, ClassStale, ClassNotADirectory}
	if got := AllClasses(); !slices.Equal(got, want) {
		t.Fatalf("AllClasses() = %v, want %v", got, want)
	}
}

func BenchmarkClassify(b *testing.B) {
	m := copyOfGolden(b)
	ctx := context.Background()
	for b.Loop() {
		if r := Classify(ctx, DataDirOnly(m.dataDir), Expect{MemberID: m.id.memberID}); r.Class != ClassOK {
			b.Fatalf("class %q: %s", r.Class, r.Detail)
		}
	}
}

func hexID(id uint64) string { return fmt.Sprintf("%x", id) }
