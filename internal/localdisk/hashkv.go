package localdisk

import (
	"context"
	"errors"
	"fmt"
	"go.etcd.io/etcd/server/v3/lease"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"
)

// KVHash is what etcd's HashKV says of a db at its newest revision: equal
// hashes at one revision are the same keys and values. A person choosing
// a survivor compares a stopped member's with another's, and the restored
// cluster's with it (docs/runbooks/README.md, "Majority lost: restore").
type KVHash struct {
	Hash            uint32 `json:"hash"`
	Revision        int64  `json:"revision"`
	CompactRevision int64  `json:"compactRevision"`
}

// hashHeadroom is the least free space a copy leaves on the scratch dir's
// filesystem, and hashHeadroomShare of its size if more: the agent's state
// dir shares it with etcd, the kubelet and the runtime, and the kubelet
// evicts pods below its nodefs thresholds (10-15 %).
const (
	hashHeadroom      = 256 << 20
	hashHeadroomShare = 0.15
)

// hashChildTimeout bounds the hash's child by itself: in its own process
// group (a terminal's Ctrl-C does not reach it), it outlives a parent
// killed, and must end, removing its copy, and let go of the lock.
const hashChildTimeout = 10 * time.Minute

// hashLockFile, in the scratch dir, is held (flock) by one hash at a time,
// across processes (the agent's, a status --cluster's): by the parent and
// by its child, which inherits it. Whoever holds it owns the scratch dir.
const hashLockFile = ".lock"

// HashDBIsolated hashes the db of the stopped member at d as etcd's HashKV
// does (etcd's own mvcc hash), in the inspection child. etcd's backend
// opens its file for writing, so the child hashes a copy, made from a
// read-only transaction under bbolt's shared flock (a member that starts
// meanwhile waits for it; one that runs is not read), in a fresh dir under
// scratch. One hash at a time (hashLockFile); under the lock, copies that
// earlier hashes left (a parent and child both killed) are removed; the
// copy needs the db's size free, and the headroom more. The child removes
// its copy when it ends, the parent the dir.
func HashDBIsolated(ctx context.Context, d Dirs, scratch string) (KVHash, error) {
	dbPath := d.DBPath()
	st, err := os.Stat(dbPath)
	if err != nil {
		return KVHash{}, err
	}
	if st.Size() == 0 {
		return KVHash{}, fmt.Errorf("%s is empty", dbPath)
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return KVHash{}, err
	}
	lock, err := os.OpenFile(filepath.Join(scratch, hashLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return KVHash{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return KVHash{}, fmt.Errorf("another hash runs (the agent's, or a status --cluster's): %s is locked; ask again", lock.Name())
	}
	old, _ := filepath.Glob(filepath.Join(scratch, "hashkv-*"))
	for _, o := range old {
		os.RemoveAll(o)
	}
	need := uint64(st.Size()) + max(hashHeadroom, uint64(hashHeadroomShare*float64(fsSize(scratch))))
	if free := FreeBytesUnder(scratch); free < need {
		return KVHash{}, fmt.Errorf("a copy of %s (%s) to hash does not fit in %s (%s free; the copy and %s left free need %s)", dbPath,
			humanize.IBytes(uint64(st.Size())), scratch, humanize.IBytes(free), humanize.IBytes(need-uint64(st.Size())), humanize.IBytes(need))
	}
	into, err := os.MkdirTemp(scratch, "hashkv-")
	if err != nil {
		return KVHash{}, err
	}
	defer os.RemoveAll(into)
	r, err := runInspectionWith(ctx, inspectRequest{DataDir: d.Data, WALDir: d.WAL, HashInto: into, LockTimeout: dbLockTimeout}, []*os.File{lock})
	switch {
	case err != nil:
		return KVHash{}, fmt.Errorf("hash %s: %w", dbPath, err)
	case r.KVHash == nil:
		return KVHash{}, errors.New(r.Detail) // (names the db already)
	}
	return *r.KVHash, nil
}

// fsSize is the size of the filesystem holding path (0: unknown).
func fsSize(path string) uint64 {
	var st syscall.Statfs_t
	if syscall.Statfs(path, &st) != nil {
		return 0
	}
	return uint64(st.Blocks) * uint64(st.Bsize)
}

// hashDB is the child's hash for HashDBIsolated: a Result holding the
// hash, or of no class with why not.
func hashDB(req inspectRequest, stage func(step string, partial Result)) Result {
	dbPath := filepath.Join(req.DataDir, dbRelPath)
	stage("open "+dbPath, Result{})
	db, err := openDBReadOnly(dbPath, req.LockTimeout)
	if errors.Is(err, errDBLocked) {
		return Result{Detail: fmt.Sprintf("%s is held by a running member: its etcd answers HashKV itself", dbPath)}
	}
	if err != nil {
		return Result{Detail: fmt.Sprintf("open %s: %v", dbPath, err)}
	}
	cp := filepath.Join(req.HashInto, "db")
	stage("copy "+dbPath+" to "+cp, Result{})
	// Removed by the child too: a parent killed meanwhile cannot; and
	// bounded by itself, for the same reason.
	defer os.Remove(cp)
	time.AfterFunc(hashChildTimeout, func() {
		os.Remove(cp)
		fmt.Fprintf(os.Stderr, "the hash did not end within %s\n", hashChildTimeout)
		os.Exit(2)
	})
	err = db.View(func(tx *bolt.Tx) error { return tx.CopyFile(cp, 0o600) })
	db.Close()
	if err != nil {
		return Result{Detail: fmt.Sprintf("copy %s: %v", dbPath, err)}
	}
	stage("hash the copy "+cp, Result{})
	cfg := backend.DefaultBackendConfig(zap.NewNop())
	cfg.Path = cp
	be := backend.New(cfg)
	defer be.Close()
	// A lessor to attach leased keys to (kube-apiserver's masterleases,
	// events): without one the store's restore panics on them.
	s := mvcc.NewStore(zap.NewNop(), be, &lease.FakeLessor{}, mvcc.StoreConfig{})
	defer s.Close()
	h, _, err := mvcc.NewHashStorage(zap.NewNop(), s).HashByRev(0)
	if err != nil {
		return Result{Detail: fmt.Sprintf("hash %s: %v", dbPath, err)}
	}
	return Result{Class: ClassOK, KVHash: &KVHash{Hash: h.Hash, Revision: h.Revision, CompactRevision: h.CompactRevision}}
}
