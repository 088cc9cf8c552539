package localdisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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

// hashHeadroom is the free space the copy leaves on the scratch dir's
// filesystem (the agent's state dir: its journal and files need room).
const hashHeadroom = 256 << 20

// HashDBIsolated hashes the db of the stopped member at d as etcd's HashKV
// does (etcd's own mvcc hash), in the inspection child. etcd's backend
// opens its file for writing, so the child hashes a copy, made from a
// read-only transaction under bbolt's shared flock (a member that starts
// meanwhile waits for it; one that runs is not read: in-use), in a fresh
// dir under scratch that is removed after, whatever the child did. The copy
// needs the db's size free there, and hashHeadroom more.
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
	if free := FreeBytesUnder(scratch); free < uint64(st.Size())+hashHeadroom {
		return KVHash{}, fmt.Errorf("a copy of %s (%s) to hash does not fit in %s (%s free, %s kept free)", dbPath,
			humanize.IBytes(uint64(st.Size())), scratch, humanize.IBytes(free), humanize.IBytes(hashHeadroom))
	}
	into, err := os.MkdirTemp(scratch, "hashkv-")
	if err != nil {
		return KVHash{}, err
	}
	defer os.RemoveAll(into)
	r, err := runInspection(ctx, inspectRequest{DataDir: d.Data, WALDir: d.WAL, HashInto: into, LockTimeout: dbLockTimeout})
	switch {
	case err != nil:
		return KVHash{}, fmt.Errorf("hash %s: %w", dbPath, err)
	case r.KVHash == nil:
		return KVHash{}, errors.New(r.Detail) // (names the db already)
	}
	return *r.KVHash, nil
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
	// Removed by the child too: a parent killed meanwhile cannot.
	defer os.Remove(cp)
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
	s := mvcc.NewStore(zap.NewNop(), be, nil, mvcc.StoreConfig{})
	defer s.Close()
	h, _, err := mvcc.NewHashStorage(zap.NewNop(), s).HashByRev(0)
	if err != nil {
		return Result{Detail: fmt.Sprintf("hash %s: %v", dbPath, err)}
	}
	return Result{Class: ClassOK, KVHash: &KVHash{Hash: h.Hash, Revision: h.Revision, CompactRevision: h.CompactRevision}}
}
