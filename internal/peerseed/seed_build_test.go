package peerseed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// dbVariant copies the fixture's db into dir, lets change alter it, and
// writes its provenance record: as streamed (the record no longer matches
// an altered db), or recomputed for the altered db.
func dbVariant(t *testing.T, fx seedFixture, change func(path string), recompute bool) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "variant.db")
	b, err := os.ReadFile(fx.db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(dst)
	}
	src := fx.src
	if recompute {
		st, err := os.Stat(dst)
		if err != nil {
			t.Fatal(err)
		}
		src.Size, src.SHA256 = st.Size(), fileSHA256(t, dst)
	}
	if err := writeSeedSource(dst, src); err != nil {
		t.Fatal(err)
	}
	return dst
}

// updateMeta changes the db's meta bucket with bbolt directly.
func updateMeta(t *testing.T, path string, f func(b *bolt.Bucket) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return f(tx.Bucket(schema.Meta.Name())) }); err != nil {
		t.Fatal(err)
	}
}

func TestBuildDataDirRefusesAndLeavesNoDataDir(t *testing.T) {
	fx := getSeedFixture(t)
	other := fx.learner ^ 0x5a5a5a5a
	tests := []struct {
		name    string
		db      func(t *testing.T) string
		newID   uint64
		cluster uint64
		prepare func(t *testing.T, dataDir string)
		want    error
		reason  string
	}{
		{name: "learner absent from the membership", newID: other, want: ErrSeedLearnerAbsent, reason: "learner-absent"},
		{name: "member is a voter", newID: fx.voter, want: ErrSeedNotLearner, reason: "not-learner"},
		{name: "foreign cluster", cluster: fx.cluster + 1, want: ErrSeedForeignCluster, reason: "foreign-cluster"},
		{
			name: "term key absent",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					updateMeta(t, p, func(b *bolt.Bucket) error { return b.Delete(schema.MetaTermKeyName) })
				}, true)
			},
			want: ErrSeedTermZero, reason: "term-zero",
		},
		{
			name: "term zero",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					updateMeta(t, p, func(b *bolt.Bucket) error { return b.Put(schema.MetaTermKeyName, make([]byte, 8)) })
				}, true)
			},
			want: ErrSeedTermZero, reason: "term-zero",
		},
		{
			name: "stored ConfState lacks the learner",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					updateMeta(t, p, func(b *bolt.Bucket) error {
						var cs raftpb.ConfState
						if err := json.Unmarshal(b.Get(schema.MetaConfStateName), &cs); err != nil {
							return err
						}
						cs.Learners = nil
						v, _ := json.Marshal(cs)
						return b.Put(schema.MetaConfStateName, v)
					})
				}, true)
			},
			want: ErrSeedConfStateMismatch, reason: "confstate-mismatch",
		},
		{
			name: "no stored ConfState",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					updateMeta(t, p, func(b *bolt.Bucket) error { return b.Delete(schema.MetaConfStateName) })
				}, true)
			},
			want: ErrSeedConfStateMismatch, reason: "confstate-mismatch",
		},
		{
			name:    "data dir exists (even empty)",
			prepare: func(t *testing.T, dataDir string) { os.Mkdir(dataDir, 0o700) },
			want:    ErrSeedDataDirExists, reason: "data-dir-exists",
		},
		{
			name: "truncated db",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					st, _ := os.Stat(p)
					os.Truncate(p, st.Size()/2)
				}, false)
			},
			want: ErrSeedCorruptDB, reason: "corrupt-db",
		},
		{
			name: "one flipped byte",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					b, _ := os.ReadFile(p)
					b[len(b)/2] ^= 0x10
					os.WriteFile(p, b, 0o600)
				}, false)
			},
			want: ErrHashMismatch, reason: "snapshot-hash-mismatch",
		},
		{
			name: "garbled meta pages, matching record",
			db: func(t *testing.T) string {
				return dbVariant(t, fx, func(p string) {
					f, _ := os.OpenFile(p, os.O_WRONLY, 0)
					f.WriteAt(make([]byte, 8192), 0)
					f.Close()
				}, true)
			},
			want: ErrSeedCorruptDB, reason: "corrupt-db",
		},
		{
			name: "no provenance record",
			db: func(t *testing.T) string {
				p := dbVariant(t, fx, nil, false)
				os.Remove(SeedSourcePath(p))
				return p
			},
			want: ErrSeedNoProvenance, reason: "no-provenance",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := fx.db
			if tt.db != nil {
				db = tt.db(t)
			}
			before := fileSHA256(t, db)
			newID, cluster := fx.learner, fx.cluster
			if tt.newID != 0 {
				newID = tt.newID
			}
			if tt.cluster != 0 {
				cluster = tt.cluster
			}
			dataDir := filepath.Join(t.TempDir(), "etcd")
			if tt.prepare != nil {
				tt.prepare(t, dataDir)
			}
			_, err := BuildDataDir(db, dataDir, newID, cluster, zap.NewNop())
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			t.Logf("refused: %v", err)
			if got := SeedReason(err); got != tt.reason {
				t.Errorf("SeedReason = %q, want %q", got, tt.reason)
			}
			if tt.prepare != nil {
				// The existing data dir is left exactly as it was.
				if entries, err := os.ReadDir(dataDir); err != nil || len(entries) != 0 {
					t.Errorf("existing data dir changed: %v %v", entries, err)
				}
				mustHaveNoSeedTemps(t, dataDir)
			} else {
				mustLeaveNoDataDir(t, dataDir)
			}
			if after := fileSHA256(t, db); after != before {
				t.Errorf("the source db changed")
			}
		})
	}
}

func TestBuildDataDirRemovesItsLeftoverTempDirAndCopiesTheDB(t *testing.T) {
	fx := getSeedFixture(t)
	dataDir := filepath.Join(t.TempDir(), "etcd")
	// What a crash mid-build leaves behind.
	stale := dataDir + seedTmpInfix + "123456"
	if err := os.MkdirAll(filepath.Join(stale, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "member", "snap", "db"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := BuildDataDir(fx.db, dataDir, fx.learner, fx.cluster, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %s: index %d term %d, %d members, %d-byte db", info.Took, info.ConsistentIndex, info.Term, info.Members, info.DBBytes)
	mustHaveNoSeedTemps(t, dataDir)
	if info.DBSHA256 != fx.src.SHA256 || info.DBBytes != fx.src.Size {
		t.Errorf("copied db %d bytes sha256 %s, the stream had %d bytes %s", info.DBBytes, info.DBSHA256, fx.src.Size, fx.src.SHA256)
	}
	if _, err := os.Stat(fx.db); err != nil {
		t.Errorf("the streamed db must stay where it was (copied, not moved): %v", err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dataDir, "member", "snap", "*.snap"))
	want := filepath.Join(dataDir, "member", "snap", fmt.Sprintf("%016x-%016x.snap", info.Term, info.ConsistentIndex))
	if len(snaps) != 1 || snaps[0] != want {
		t.Errorf("snap files %v, want [%s]", snaps, want)
	}
	if st, err := os.Stat(dataDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v (%v), want 0700 as etcd wants it", st.Mode().Perm(), err)
	}
	r := localdisk.Classify(ctxWithTimeout(t, 30*time.Second), localdisk.DataDirOnly(dataDir), localdisk.Expect{MemberID: fx.learner, ClusterID: fx.cluster})
	if r.Class != localdisk.ClassOK {
		t.Errorf("seeded data dir classifies %s: %s", r.Class, r.Detail)
	}
	// A second build onto the same data dir is refused, not merged.
	if _, err := BuildDataDir(fx.db, dataDir, fx.learner, fx.cluster, zap.NewNop()); !errors.Is(err, ErrSeedDataDirExists) {
		t.Errorf("second build: %v, want ErrSeedDataDirExists", err)
	}
}

func TestSeedSourceRecordRoundTrips(t *testing.T) {
	db := filepath.Join(t.TempDir(), "x.db")
	in := SeedSource{ClusterID: 0xfedcba9876543210, SourceID: 0x8e9e05c52164694d, LeaderID: 1, Endpoint: "https://10.0.0.1:2379",
		LeaderIndex: 42, SourceApplied: 43, Size: 8192, SHA256: strings.Repeat("ab", 32), Version: "3.6.0",
		StreamedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := writeSeedSource(db, in); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(SeedSourcePath(db))
	if !bytes.Contains(raw, []byte(`"clusterID": "fedcba9876543210"`)) {
		t.Errorf("IDs are not written in hex:\n%s", raw)
	}
	out, err := ReadSeedSource(db)
	if err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("read back %+v, wrote %+v", out, in)
	}
	if err := os.WriteFile(SeedSourcePath(db), []byte(`{"clusterID":"0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSeedSource(db); !errors.Is(err, ErrSeedNoProvenance) {
		t.Errorf("incomplete record: %v, want ErrSeedNoProvenance", err)
	}
	if got := SeedReason(fmt.Errorf("wrapped: %w", ErrDiskFull)); got != "disk-full" {
		t.Errorf("SeedReason(disk full) = %q", got)
	}
	if got := SeedReason(fmt.Errorf("stream: %w", ErrHashMismatch)); got != "snapshot-hash-mismatch" {
		t.Errorf("SeedReason(hash mismatch) = %q", got)
	}
	if got := SeedReason(fmt.Errorf("stream: %w after 5 bytes: EOF", ErrTruncated)); got != "snapshot-truncated" {
		t.Errorf("SeedReason(truncated) = %q", got)
	}
	if got := SeedReason(context.DeadlineExceeded); got != "error" {
		t.Errorf("SeedReason(other) = %q", got)
	}
}

// BeforeRename sees the complete, synced temp dir while the data dir does
// not exist yet; its error aborts the build and leaves neither behind.
func TestBuildDataDirBeforeRenameSeesTheTempDirAndCanAbort(t *testing.T) {
	fx := getSeedFixture(t)
	dataDir := filepath.Join(t.TempDir(), "etcd")
	stop := errors.New("held and abandoned")
	var sawTemp string
	_, err := BuildDataDir(fx.db, dataDir, fx.learner, fx.cluster, zap.NewNop(), BeforeRename(func(tmp string) error {
		sawTemp = tmp
		if _, err := os.Stat(filepath.Join(tmp, "member", "snap", "db")); err != nil {
			t.Errorf("temp dir incomplete at the rename: %v", err)
		}
		if _, err := os.Lstat(dataDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("data dir exists before the rename: %v", err)
		}
		return stop
	}))
	if !errors.Is(err, stop) {
		t.Fatalf("got %v, want the hook's error", err)
	}
	if !strings.HasPrefix(filepath.Base(sawTemp), filepath.Base(dataDir)+seedTmpInfix) {
		t.Errorf("hook saw %q, want a %s temp dir next to the data dir", sawTemp, seedTmpInfix)
	}
	mustLeaveNoDataDir(t, dataDir)
	mustHaveNoSeedTemps(t, dataDir)
}

// MoveDB: the streamed db becomes the data dir's db without a copy, and is
// still checked against the stream's sha256 after the move.
func TestBuildDataDirMoveDBMovesAndStillChecksTheHash(t *testing.T) {
	fx := getSeedFixture(t)
	db := dbVariant(t, fx, nil, false)
	dataDir := filepath.Join(t.TempDir(), "etcd")
	info, err := BuildDataDir(db, dataDir, fx.learner, fx.cluster, zap.NewNop(), MoveDB())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the streamed db is still at %s (%v): want it moved", db, err)
	}
	if info.DBSHA256 != fx.src.SHA256 || info.DBBytes != fx.src.Size {
		t.Errorf("moved db %d bytes sha256 %s, the stream had %d bytes %s", info.DBBytes, info.DBSHA256, fx.src.Size, fx.src.SHA256)
	}
	r := localdisk.Classify(ctxWithTimeout(t, 30*time.Second), localdisk.DataDirOnly(dataDir), localdisk.Expect{MemberID: fx.learner, ClusterID: fx.cluster})
	if r.Class != localdisk.ClassOK {
		t.Errorf("seeded data dir classifies %s: %s", r.Class, r.Detail)
	}

	flipped := dbVariant(t, fx, func(p string) {
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 0x10
		os.WriteFile(p, b, 0o600)
	}, false)
	dataDir2 := filepath.Join(t.TempDir(), "etcd")
	if _, err := BuildDataDir(flipped, dataDir2, fx.learner, fx.cluster, zap.NewNop(), MoveDB()); !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("moved db with a flipped byte: %v, want ErrHashMismatch", err)
	}
	mustLeaveNoDataDir(t, dataDir2)
	mustHaveNoSeedTemps(t, dataDir2)
}

// Issue 44: the build says how far it is, in bytes of the db copied into
// the data dir or, moved there, hashed again: every byte once, either way.
func TestBuildDataDirSaysHowFarThePlacedDBIs(t *testing.T) {
	fx := getSeedFixture(t)
	for _, move := range []bool{false, true} {
		db := dbVariant(t, fx, nil, false)
		var total int64
		calls := 0
		opts := []BuildOption{OnDBBytes(func(n int64) { total += n; calls++ })}
		if move {
			opts = append(opts, MoveDB())
		}
		if _, err := BuildDataDir(db, filepath.Join(t.TempDir(), "etcd"), fx.learner, fx.cluster, zap.NewNop(), opts...); err != nil {
			t.Fatal(err)
		}
		if total != fx.src.Size || calls == 0 {
			t.Errorf("moved %v: %d bytes told in %d calls, the db has %d", move, total, calls, fx.src.Size)
		}
	}
}
