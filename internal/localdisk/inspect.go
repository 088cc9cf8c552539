package localdisk

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// inspectRequest is what the parent asks the inspection child to check.
type inspectRequest struct {
	DataDir string
	// WALDir is the dedicated --wal-dir ("" when in member/wal).
	WALDir      string
	Expect      Expect
	LockTimeout time.Duration
	// RaftPositionOnly: read only where the WAL's log stands, without a
	// lock (ReadRaftPositionIsolated); the db is not opened.
	RaftPositionOnly bool
	// HashInto: hash the db (HashDBIsolated), on a copy made in this
	// scratch dir; nothing else is read.
	HashInto string `json:",omitempty"`
}

// inspect does the deep checks on a data dir whose layout is ok. It runs in
// the inspection child, where panics (ours or bbolt's) are allowed to crash
// the process: stage is called before each step with what is known so far,
// so the parent can say where it crashed and keep the IDs already read.
func inspect(req inspectRequest, stage func(step string, partial Result)) Result {
	if req.RaftPositionOnly {
		return raftPositionOnly(req, stage)
	}
	if req.HashInto != "" {
		return hashDB(req, stage)
	}
	dbPath := filepath.Join(req.DataDir, dbRelPath)
	walDir := Dirs{Data: req.DataDir, WAL: req.WALDir}.WALDir()

	stage("open "+dbPath, Result{})
	// The parent holds a shared flock too, so a member cannot hold (or take)
	// the exclusive one; locked here only means something raced the parent.
	db, err := openDBReadOnly(dbPath, req.LockTimeout)
	if errors.Is(err, errDBLocked) {
		return inUse(dbPath, walDir)
	}
	if err != nil {
		return corruptf("open %s: %v", dbPath, err)
	}
	// Closed on a return only, never deferred: bbolt panics in Begin when
	// both meta pages go bad under the open db (damaged while it is read)
	// and leaves its locks held, so a deferred Close would wait on them
	// forever and the child would hang instead of crashing (a verdict).
	r := inspectOpen(req, db, dbPath, walDir, stage)
	db.Close()
	return r
}

// inspectOpen is inspect's checks of the open db and the WAL.
func inspectOpen(req inspectRequest, db *bolt.DB, dbPath, walDir string, stage func(step string, partial Result)) Result {
	stage("read WAL "+walDir, Result{})
	ws, err := readWAL(req.DataDir, walDir)
	if err != nil {
		return corruptf("%s: %v", walDir, err)
	}
	r := Result{MemberID: ws.memberID, ClusterID: ws.clusterID, WALTerm: ws.term, WALIndex: ws.lastIndex, WALCommit: ws.commit}
	if mismatch := identityMismatch(ws.memberID, ws.clusterID, req.Expect); mismatch != "" {
		r.Class = ClassForeign
		r.Detail = fmt.Sprintf("%s metadata %s", walDir, mismatch)
		return r
	}

	stage("check "+dbPath, r)
	r.ConsistentIndex, err = checkDB(db)
	if err != nil {
		r.Class = ClassCorrupt
		r.Detail = fmt.Sprintf("%s: %v", dbPath, err)
		return r
	}
	r.Revision = lastRevision(db)
	if r.ConsistentIndex > ws.lastIndex {
		// etcd replays the WAL from the db's consistent index; entries the
		// db has applied but the WAL lacks mean the WAL lost synced data.
		r.Class = ClassCorrupt
		r.Detail = fmt.Sprintf("%s has applied up to raft index %d but %s ends at index %d: WAL entries are missing",
			dbPath, r.ConsistentIndex, walDir, ws.lastIndex)
		return r
	}

	if hw := req.Expect.HighWater; hw.MemberID != 0 && hw.MemberID == ws.memberID && (ws.term < hw.Term || ws.lastIndex < hw.Index) {
		// Its own data, intact, but older than what the member was seen
		// to keep: under its ID it would have forgotten entries it
		// acknowledged, and maybe votes (rule 9).
		r.Class = ClassStale
		r.Detail = fmt.Sprintf("%s ends at raft index %d, term %d, but member %x was seen to keep index %d, term %d: the data went back in time "+
			"(a restored volume or backup); it must not start under its ID", walDir, ws.lastIndex, ws.term, ws.memberID, hw.Index, hw.Term)
		return r
	}
	r.Class = ClassOK
	r.Detail = fmt.Sprintf("member %x in cluster %x; db consistent index %d; WAL read from snapshot index %d to index %d, term %d%s",
		r.MemberID, r.ClusterID, r.ConsistentIndex, ws.start.Index, ws.lastIndex, ws.term, formatBrokenSnaps(ws.brokenSnaps))
	return r
}

// inUse builds the in-use verdict. The IDs come from the head of the newest
// WAL segment, which is safe to read while the member appends to its tail.
func inUse(dbPath, walDir string) Result {
	r := Result{Class: ClassInUse}
	memberID, clusterID, err := ReadWALIdentity(walDir)
	if err != nil {
		r.Detail = fmt.Sprintf("%s is locked by another process (is the member running?); WAL identity unreadable: %v", dbPath, err)
		return r
	}
	r.MemberID, r.ClusterID = memberID, clusterID
	r.Detail = fmt.Sprintf("%s is locked by another process (is the member running?); WAL says member %x in cluster %x",
		dbPath, memberID, clusterID)
	return r
}
