package peerseed

// Seed mode (docs/design.md §6 step 6): instead of starting the new learner on
// an empty data dir and letting the leader send it a raft snapshot, the agent
// builds the learner's data dir itself from a snapshot streamed from a
// follower after the learner was added. The learner then restarts like a
// member that was merely down: it catches up from the leader's log.
//
// The data dir is what `etcdutl snapshot restore` writes, except that the
// member keeps its cluster and its place in the log:
//
//	member/snap/db                      the streamed db, copied (or moved: MoveDB)
//	member/snap/<term>-<ci>.snap        raft snapshot at the db's consistent index
//	member/wal/0000000000000000-0000000000000000.wal
//	                                    metadata {NodeID: learner, ClusterID},
//	                                    snapshot record {ci, term, ConfState},
//	                                    HardState {Term: term, Commit: ci}
//
// Every piece is written with etcd's own packages (storage/backend, schema,
// membership, snap, wal), and every value comes from the db itself (never
// from a Status call: a term higher than the db's would make the leader step
// down when the learner answers, and the learner would never catch up).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Reasons BuildDataDir (and StreamForSeed) refuse to seed (test with
// errors.Is). Any of them means: fall back to raft mode (empty data dir).
var (
	// ErrSeedLearnerAbsent: the new member is not in the db's membership
	// (the snapshot was taken before the add was applied, or it is another
	// member's ID).
	ErrSeedLearnerAbsent = errors.New("the new member is not in the snapshot's membership")
	// ErrSeedNotLearner: the new member is in the db as a voter.
	ErrSeedNotLearner = errors.New("the new member is not a learner in the snapshot's membership")
	// ErrSeedTermZero: the db has no term for its consistent index (written
	// by etcd < 3.5, or damaged); the snapshot and WAL need it.
	ErrSeedTermZero = errors.New("the snapshot's db has no term for its consistent index")
	// ErrSeedConfStateMismatch: the db's stored raft ConfState is missing or
	// differs from its membership (voters + learners).
	ErrSeedConfStateMismatch = errors.New("the snapshot's raft ConfState does not match its membership")
	// ErrSeedForeignCluster: the snapshot was streamed from another cluster
	// than the one the learner was added to.
	ErrSeedForeignCluster = errors.New("the snapshot comes from another cluster")
	// ErrSeedNoProvenance: the db has no readable provenance record (written
	// by StreamForSeed next to it), so its cluster cannot be checked.
	ErrSeedNoProvenance = errors.New("the snapshot has no seed provenance record")
	// ErrSeedCorruptDB: the db is not the one that was streamed and verified
	// (size or sha256 differ), or it is not a readable etcd db.
	ErrSeedCorruptDB = errors.New("the snapshot's db is damaged or not the one streamed")
	// ErrSeedDataDirExists: the data dir exists; seeding never replaces one.
	ErrSeedDataDirExists = errors.New("the data dir already exists")
	// ErrSeedMembershipDiffers: the snapshot's membership (with the learner
	// written in) is not the cluster's now (ExpectMembership): a change
	// between the snapshot and the add would be judged differently by the
	// learner (etcd validates each change again where it applies).
	ErrSeedMembershipDiffers = errors.New("the snapshot's membership differs from the cluster's")
	// ErrSeedDedicatedWALDir: etcd runs with --wal-dir; a seeded data dir
	// carries its WAL in member/wal, which etcd would ignore.
	ErrSeedDedicatedWALDir = errors.New("the member runs with a dedicated --wal-dir, which seeding does not build")
	// ErrSeedVolumeRoot: the data dir is a volume's root (a mount point or
	// a PV's path); a seeded data dir is renamed into place, which a volume
	// root never is.
	ErrSeedVolumeRoot = errors.New("the data dir is a volume's root, which seeding does not rename into place")
	// ErrSeedDataDirSymlink: the data dir is a symlink, which a seeded data
	// dir renamed into place would replace (and the disk it points to).
	ErrSeedDataDirSymlink = errors.New("the data dir is a symlink, which seeding does not rename into place")
)

// SeedReason is a short, stable name for why seeding was refused, for the
// journal, metrics labels and Events: "learner-absent", "not-learner",
// "term-zero", "confstate-mismatch", "foreign-cluster", "no-provenance",
// "corrupt-db", "data-dir-exists", "membership-differs", "dedicated-wal-dir", "data-dir-volume-root", "data-dir-symlink", "disk-full", "snapshot-hash-mismatch",
// "snapshot-truncated", "no-cluster-version", "storage-version-newer",
// "v2-store-enabled", "v2-snapshot-mismatch", or "error" for anything else (I/O errors, a
// cancelled wait...). nil gives "".
func SeedReason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range []struct {
		err  error
		name string
	}{
		{ErrSeedLearnerAbsent, "learner-absent"},
		{ErrSeedNotLearner, "not-learner"},
		{ErrSeedTermZero, "term-zero"},
		{ErrSeedConfStateMismatch, "confstate-mismatch"},
		{ErrSeedForeignCluster, "foreign-cluster"},
		{ErrSeedNoProvenance, "no-provenance"},
		{ErrSeedCorruptDB, "corrupt-db"},
		{ErrSeedDataDirExists, "data-dir-exists"},
		{ErrSeedMembershipDiffers, "membership-differs"},
		{ErrSeedDedicatedWALDir, "dedicated-wal-dir"},
		{ErrSeedVolumeRoot, "data-dir-volume-root"},
		{ErrSeedDataDirSymlink, "data-dir-symlink"},
		{ErrSeedNoClusterVersion, "no-cluster-version"},
		{ErrSeedStorageVersionNewer, "storage-version-newer"},
		{ErrSeedV2StoreEnabled, "v2-store-enabled"},
		{ErrSeedV2SnapshotMismatch, "v2-snapshot-mismatch"},
		{ErrDiskFull, "disk-full"},
		{ErrHashMismatch, "snapshot-hash-mismatch"},
		{ErrTruncated, "snapshot-truncated"},
	} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "error"
}

// SeedInfo is what BuildDataDir wrote.
type SeedInfo struct {
	DataDir   string
	MemberID  uint64 // the learner: the WAL's NodeID
	ClusterID uint64 // the WAL's ClusterID
	// ConsistentIndex and Term are the db's: the raft snapshot's index and
	// term, and the WAL's HardState {Term, Commit}.
	ConsistentIndex uint64
	Term            uint64
	// ConfState is the raft snapshot's (equal to the one stored in the db).
	ConfState raftpb.ConfState
	// Members is the size of the membership written into the raft snapshot.
	Members int
	// LearnerName and LearnerPeerURLs are the learner as the db knows it
	// (the name is empty until it first publishes).
	LearnerName     string
	LearnerPeerURLs []string
	// LearnerWritten: the db predated the add; the learner was written
	// into its membership (WithLearner).
	LearnerWritten bool
	// DBBytes and DBSHA256 are the copied db's, equal to the streamed one's
	// (etcd's backend, which reads the membership, then commits once on
	// close: the data dir's db differs from it in a bbolt meta page).
	DBBytes  int64
	DBSHA256 string
	Took     time.Duration
}

// BuildOption adjusts BuildDataDir.
type BuildOption func(*buildOptions)

type buildOptions struct {
	beforeRename func(tmp string) error
	moveDB       bool
	// learnerPeerURLs: WithLearner's (nil: the learner must be in the db).
	learnerPeerURLs []string
	// expect: ExpectMembership's (nil: not compared).
	expect []ExpectedMember
	// removed: WithoutMember's (0: none).
	removed uint64
	// learnerVersion, servingVersion: WithLearnerVersion's and
	// WithServingVersion's ("": unknown).
	learnerVersion, servingVersion string
	// alterV2: withV2Data's (tests only).
	alterV2 func([]byte) []byte
	// dbBytes: OnDBBytes' (nil: none).
	dbBytes func(n int64)
}

// MoveDB moves the db at dbPath into the data dir instead of copying it,
// when both are on one filesystem (a copy otherwise): for a caller that
// discards the stream anyway, it saves writing the whole db a second time.
// The moved file is hashed again and must still match the stream. dbPath is
// then consumed: on an error it is removed with the temp dir.
func MoveDB() BuildOption {
	return func(o *buildOptions) { o.moveDB = true }
}

// OnDBBytes calls f with each chunk of the db copied into the data dir or
// hashed there again (a moved one is hashed, a copied one hashed as it is
// written): the build's progress, in bytes of the db, for a db of several
// GiB. f runs on the building goroutine.
func OnDBBytes(f func(n int64)) BuildOption {
	return func(o *buildOptions) { o.dbBytes = f }
}

// BeforeRename runs f once the data dir is built and synced in its temp dir
// tmp, right before the rename; an error from f aborts the build (the temp
// dir is removed). The e2e suite holds the build there to kill the agent
// mid-build.
func BeforeRename(f func(tmp string) error) BuildOption {
	return func(o *buildOptions) { o.beforeRename = f }
}

// seedTmpInfix names BuildDataDir's temp dirs: <dataDir>.seed-tmp-<random>.
const seedTmpInfix = ".seed-tmp-"

// BuildDataDir builds a member data dir for learner newID of cluster
// clusterID from the verified db at dbPath (streamed by StreamForSeed, whose
// provenance record next to it must name clusterID and whose size and
// sha256 the copy must match). It builds in a temp dir next to dataDir
// (same filesystem), fsyncs every file and dir, then renames it to dataDir,
// which must not exist (ErrSeedDataDirExists): it never leaves a half-built
// dataDir. On any error the temp dir is removed; a crash leaves at most the
// temp dir, which the next call removes (<dataDir>.seed-tmp-*, ours alone).
//
// The db is copied, never moved: dbPath stays as it was (it is kept with the
// quarantine). It refuses, with one of the ErrSeed* reasons, a db whose
// membership lacks newID or has it as a voter, whose term is 0 or absent, or
// whose stored ConfState differs from its membership, that has no cluster
// version, whose storage version is newer than the learner's etcd
// (WithLearnerVersion), or whose written .snap, read back as etcd 3.5's v2
// store, differs from it; ErrDiskFull when the filesystem lacks room for
// the copy (see plan.StreamBytesNeeded).
func BuildDataDir(dbPath, dataDir string, newID, clusterID uint64, lg *zap.Logger, opts ...BuildOption) (info SeedInfo, err error) {
	begin := time.Now()
	var o buildOptions
	for _, opt := range opts {
		opt(&o)
	}
	if lg == nil {
		lg = zap.NewNop()
	}
	if newID == 0 || clusterID == 0 {
		return SeedInfo{}, fmt.Errorf("seed: member ID (%x) and cluster ID (%x) must both be set", newID, clusterID)
	}
	dataDir = filepath.Clean(dataDir)
	if _, err := os.Lstat(dataDir); err == nil {
		return SeedInfo{}, fmt.Errorf("%w: %s", ErrSeedDataDirExists, dataDir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return SeedInfo{}, err
	}
	src, err := ReadSeedSource(dbPath)
	if err != nil {
		return SeedInfo{}, err
	}
	if src.ClusterID != clusterID {
		return SeedInfo{}, fmt.Errorf("%w: %s was streamed from %s of cluster %x, the learner %x was added to cluster %x",
			ErrSeedForeignCluster, dbPath, src.Endpoint, src.ClusterID, newID, clusterID)
	}
	st, err := os.Stat(dbPath)
	if err != nil {
		return SeedInfo{}, err
	}
	if st.Size() != src.Size {
		return SeedInfo{}, fmt.Errorf("%w: %s has %d bytes, %d were streamed", ErrSeedCorruptDB, dbPath, st.Size(), src.Size)
	}

	parent := filepath.Dir(dataDir)
	if err := removeSeedTemps(dataDir); err != nil {
		return SeedInfo{}, err
	}
	if free, err := localdisk.FreeBytes(parent); err != nil {
		return SeedInfo{}, fmt.Errorf("check free space in %s: %w", parent, err)
	} else if need := plan.StreamBytesNeeded(src.Size); free < need {
		return SeedInfo{}, fmt.Errorf("%w: %s has %d bytes (%d MiB) free, the seeded data dir needs %d bytes (%d MiB)",
			ErrDiskFull, parent, free, free>>20, need, need>>20)
	}
	tmp, err := os.MkdirTemp(parent, filepath.Base(dataDir)+seedTmpInfix)
	if err != nil {
		return SeedInfo{}, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
			if errors.Is(err, syscall.ENOSPC) {
				err = fmt.Errorf("%w: %w", ErrDiskFull, err)
			}
		}
	}()
	// etcd's code logs Fatal (os.Exit) on some errors; in the agent that
	// must be a panic, which buildInto turns into an error.
	elg := lg.WithOptions(zap.WithFatalHook(zapcore.WriteThenPanic))
	info, err = buildInto(tmp, dbPath, src, newID, clusterID, o, elg)
	if err != nil {
		return SeedInfo{}, err
	}
	if err := fsutil.SyncTree(tmp); err != nil {
		return SeedInfo{}, err
	}
	if o.beforeRename != nil {
		if err := o.beforeRename(tmp); err != nil {
			return SeedInfo{}, err
		}
	}
	if err := renameNoReplace(tmp, dataDir); err != nil {
		if errors.Is(err, os.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return SeedInfo{}, fmt.Errorf("%w: %s appeared while it was built", ErrSeedDataDirExists, dataDir)
		}
		return SeedInfo{}, fmt.Errorf("rename %s to %s: %w", tmp, dataDir, err)
	}
	if err := fsutil.SyncDir(parent); err != nil {
		// The rename may not survive a crash: do not leave a data dir that
		// might vanish (the caller falls back, or retries from scratch).
		os.RemoveAll(dataDir)
		return SeedInfo{}, err
	}
	info.DataDir = dataDir
	info.Took = time.Since(begin)
	lg.Info("seeded learner data dir from the snapshot",
		zap.String("data-dir", dataDir), zap.String("member-id", types.ID(newID).String()),
		zap.String("cluster-id", types.ID(clusterID).String()), zap.Uint64("consistent-index", info.ConsistentIndex),
		zap.Uint64("term", info.Term), zap.Strings("voters", hexIDs(info.ConfState.Voters)), zap.Strings("learners", hexIDs(info.ConfState.Learners)),
		zap.Int64("db-bytes", info.DBBytes), zap.String("snapshot-source", src.Endpoint), zap.Duration("took", info.Took))
	return info, nil
}

// buildInto lays out the data dir in dir (empty, ours).
func buildInto(dir, dbPath string, src SeedSource, newID, clusterID uint64, o buildOptions, lg *zap.Logger) (SeedInfo, error) {
	snapDir := filepath.Join(dir, "member", "snap")
	walDir := filepath.Join(dir, "member", "wal")
	if err := fileutil.CreateDirAll(lg, snapDir); err != nil {
		return SeedInfo{}, err
	}
	db := filepath.Join(snapDir, "db")
	size, sum, err := placeDB(dbPath, db, o.moveDB, o.dbBytes)
	if err != nil {
		return SeedInfo{}, err
	}
	if size != src.Size {
		return SeedInfo{}, fmt.Errorf("%w: %s has %d bytes, the stream had %d", ErrSeedCorruptDB, dbPath, size, src.Size)
	}
	if sum != src.SHA256 {
		// Changed on disk after the stream was verified (bit rot, a
		// stray writer): the same refusal as a stream that fails its hash.
		return SeedInfo{}, fmt.Errorf("%w: %s hashes to sha256 %s, the verified stream to %s", ErrHashMismatch, dbPath, sum, src.SHA256)
	}
	// A read-only look first: bbolt errors (and panics) on a damaged file
	// are reported here, before etcd's backend opens it for writing.
	if _, _, err := VerifyDB(db); err != nil {
		return SeedInfo{}, fmt.Errorf("%w: %w", ErrSeedCorruptDB, err)
	}
	state, err := readSeedDB(db, newID, o.learnerPeerURLs, o.removed, lg)
	if err != nil {
		return SeedInfo{}, err
	}
	if o.expect != nil {
		if err := sameMembership(state.all, o.expect); err != nil {
			return SeedInfo{}, err
		}
	}
	if err := checkVersions(state.view, o); err != nil {
		return SeedInfo{}, err
	}
	ci, term, cs := state.ci, state.term, state.confState
	if o.alterV2 != nil {
		state.v2 = o.alterV2(state.v2)
	}

	// The raft snapshot: etcd recovers its v2 store (membership) from Data
	// at start, and applies later conf changes (the promote) to it: nil
	// Data panics at start, an empty membership panics at the promote.
	ss := snap.New(lg, snapDir)
	if err := ss.SaveSnap(raftpb.Snapshot{Data: state.v2, Metadata: raftpb.SnapshotMetadata{Index: ci, Term: term, ConfState: cs}}); err != nil {
		return SeedInfo{}, fmt.Errorf("save raft snapshot: %w", err)
	}

	md, err := (&etcdserverpb.Metadata{NodeID: newID, ClusterID: clusterID}).Marshal()
	if err != nil {
		return SeedInfo{}, err
	}
	w, err := wal.Create(lg, walDir, md)
	if err != nil {
		return SeedInfo{}, fmt.Errorf("create WAL: %w", err)
	}
	if err := w.SaveSnapshot(walpb.Snapshot{Index: ci, Term: term, ConfState: &cs}); err != nil {
		w.Close()
		return SeedInfo{}, fmt.Errorf("WAL snapshot record: %w", err)
	}
	if err := w.Save(raftpb.HardState{Term: term, Commit: ci}, nil); err != nil {
		w.Close()
		return SeedInfo{}, fmt.Errorf("WAL hard state: %w", err)
	}
	if err := w.Close(); err != nil {
		return SeedInfo{}, fmt.Errorf("close WAL: %w", err)
	}
	if err := readBack(snapDir, walDir, newID, clusterID, ci, term, state.view, lg); err != nil {
		return SeedInfo{}, fmt.Errorf("read back the seeded data dir: %w", err)
	}
	return SeedInfo{MemberID: newID, ClusterID: clusterID, ConsistentIndex: ci, Term: term, ConfState: cs,
		Members: state.members, LearnerName: state.learner.Name, LearnerPeerURLs: state.learner.PeerURLs,
		LearnerWritten: state.written, DBBytes: size, DBSHA256: sum}, nil
}

// seedDB is what the seed needs from the db.
type seedDB struct {
	ci, term  uint64
	confState raftpb.ConfState
	v2        []byte
	members   int
	learner   membership.Member
	written   bool // the learner was written into the db (WithLearner)
	all       []ExpectedMember
	view      dbView // the db's buckets after the writes
}

// readSeedDB reads the consistent index, term, ConfState and membership
// from the db at path (our copy: etcd's backend opens it read-write, as
// etcd itself will) and checks them against the learner newID.
func readSeedDB(path string, newID uint64, learnerPeerURLs []string, removed uint64, lg *zap.Logger) (s seedDB, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: reading %s: etcd panicked: %v", ErrSeedCorruptDB, path, p)
		}
	}()
	be := backend.NewDefaultBackend(lg, path)
	defer be.Close()

	s.ci, s.term = schema.ReadConsistentIndex(be.ReadTx())
	if s.ci == 0 {
		return s, fmt.Errorf("%w: no consistent index", ErrSeedCorruptDB)
	}
	if s.term == 0 {
		return s, fmt.Errorf("%w (consistent index %d)", ErrSeedTermZero, s.ci)
	}
	tx := be.ReadTx()
	tx.RLock()
	stored := schema.UnsafeConfStateFromBackend(lg, tx)
	tx.RUnlock()

	cl := membership.NewCluster(lg)
	cl.SetBackend(schema.NewMembershipBackend(lg, be))
	cl.UnsafeLoad()
	m := cl.Member(types.ID(newID))
	if m == nil && learnerPeerURLs != nil && !cl.IsIDRemoved(types.ID(newID)) {
		if stored == nil || !sameConfState(*stored, confStateOf(cl.Members())) {
			return s, fmt.Errorf("%w: the db's stored ConfState does not match its membership; not writing the learner into it", ErrSeedConfStateMismatch)
		}
		if removed != 0 && removed != newID && cl.Member(types.ID(removed)) != nil {
			writeRemoval(be, cl, removed, lg)
		}
		if m, err = writeLearner(be, cl, newID, learnerPeerURLs, lg); err != nil {
			return s, err
		}
		s.written = true
	}
	switch {
	case m == nil && cl.IsIDRemoved(types.ID(newID)):
		return s, fmt.Errorf("%w: %x was removed (db at index %d)", ErrSeedLearnerAbsent, newID, s.ci)
	case m == nil:
		return s, fmt.Errorf("%w: %x is not among the %d members at index %d", ErrSeedLearnerAbsent, newID, len(cl.Members()), s.ci)
	case !m.IsLearner:
		return s, fmt.Errorf("%w: %x is a voter at index %d", ErrSeedNotLearner, newID, s.ci)
	}
	s.learner = *m
	members := cl.Members()
	s.members = len(members)
	for _, mm := range members {
		s.all = append(s.all, ExpectedMember{ID: uint64(mm.ID), PeerURLs: mm.PeerURLs, IsLearner: mm.IsLearner})
	}
	s.confState = confStateOf(members)
	if s.written {
		tx := be.ReadTx()
		tx.RLock()
		stored = schema.UnsafeConfStateFromBackend(lg, tx)
		tx.RUnlock()
	}
	if stored == nil {
		return s, fmt.Errorf("%w: the db stores no ConfState (written by etcd < 3.5?)", ErrSeedConfStateMismatch)
	}
	if !sameConfState(*stored, s.confState) {
		return s, fmt.Errorf("%w: the db stores %s, its membership gives %s", ErrSeedConfStateMismatch,
			fmtConfState(*stored), fmtConfState(s.confState))
	}
	s.v2 = etcdserver.GetMembershipInfoInV2Format(lg, cl)
	if len(s.v2) == 0 {
		return s, errors.New("the membership rendered an empty v2 store")
	}
	s.view = readDBView(be, lg)
	return s, nil
}

// sameConfState compares a stored ConfState with one built from the
// membership (sorted, no joint consensus: etcd never uses it).
func sameConfState(stored, want raftpb.ConfState) bool {
	v, l := slices.Clone(stored.Voters), slices.Clone(stored.Learners)
	slices.Sort(v)
	slices.Sort(l)
	return slices.Equal(v, want.Voters) && slices.Equal(l, want.Learners) &&
		len(stored.VotersOutgoing) == 0 && len(stored.LearnersNext) == 0 && !stored.AutoLeave
}

// hexIDs shows member IDs in hex, as etcdctl does.
func hexIDs(v []uint64) []string {
	out := make([]string, len(v))
	for i, id := range v {
		out[i] = types.ID(id).String()
	}
	return out
}

// fmtConfState shows a ConfState with its IDs in hex.
func fmtConfState(cs raftpb.ConfState) string {
	ids := func(v []uint64) string { return "[" + strings.Join(hexIDs(v), " ") + "]" }
	s := "voters " + ids(cs.Voters) + " learners " + ids(cs.Learners)
	if len(cs.VotersOutgoing) > 0 || len(cs.LearnersNext) > 0 || cs.AutoLeave {
		s += fmt.Sprintf(" (joint: outgoing %s, learners next %s, auto leave %v)", ids(cs.VotersOutgoing), ids(cs.LearnersNext), cs.AutoLeave)
	}
	return s
}

// readBack reads the data dir the way etcd's bootstrap does (newest valid
// snapshot, WAL from it) and checks that it says what was written, and that
// the snapshot's v2 store (what etcd 3.5 takes its membership from) says
// what the db says.
func readBack(snapDir, walDir string, newID, clusterID, ci, term uint64, db dbView, lg *zap.Logger) error {
	walSnaps, err := wal.ValidSnapshotEntries(lg, walDir)
	if err != nil {
		return err
	}
	rs, err := snap.New(lg, snapDir).LoadNewestAvailable(walSnaps)
	if err != nil {
		return err
	}
	if rs.Metadata.Index != ci || rs.Metadata.Term != term || len(rs.Data) == 0 {
		return fmt.Errorf("newest snapshot is index %d term %d (%d bytes of data), want %d %d", rs.Metadata.Index, rs.Metadata.Term, len(rs.Data), ci, term)
	}
	if err := checkV2Snapshot(rs.Data, db, lg); err != nil {
		return err
	}
	w, err := wal.OpenForRead(lg, walDir, walpb.Snapshot{Index: ci, Term: term})
	if err != nil {
		return err
	}
	defer w.Close()
	mdBytes, hs, ents, err := w.ReadAll()
	if err != nil {
		return err
	}
	var md etcdserverpb.Metadata
	if err := md.Unmarshal(mdBytes); err != nil {
		return err
	}
	if md.NodeID != newID || md.ClusterID != clusterID || hs.Term != term || hs.Commit != ci || hs.Vote != 0 || len(ents) != 0 {
		return fmt.Errorf("WAL says node %x cluster %x, hard state %s, %d entries; want %x %x, term %d commit %d, none",
			md.NodeID, md.ClusterID, hs.String(), len(ents), newID, clusterID, term, ci)
	}
	return nil
}
