// Package localdisk inspects and, where explicitly asked, moves an etcd
// member's local data dir.
//
// Classification never writes: the bbolt db is opened read-only, the WAL is
// opened with wal.OpenForRead, and snapshot files are read with snap.Read
// (not Snapshotter.Load*, which renames broken .snap files and deletes
// orphaned db.tmp files). The only mutating operation is
// QuarantineDataDir, which renames a data dir but never deletes anything.
//
// The on-disk formats are read with etcd's own packages (wal, snap, schema,
// bbolt) so this package agrees with what the etcd server would accept at
// startup.
//
// Classify's deep checks run in a child process, a re-exec of the current
// binary, because bbolt can crash the whole process on a damaged db (see
// isolate.go). Importing this package therefore installs an init hook: a
// process started with LOCALDISK_INSPECT_REQUEST in its environment runs
// one inspection and exits before main. It is inert otherwise.
package localdisk

import "github.com/etcd-agent/etcd-agent/internal/observation"

// Class is the verdict on a data dir.
type Class string

const (
	// ClassOK: the data dir can be used to restart the member.
	ClassOK Class = observation.DataDirOK
	// ClassMissing: the data dir does not exist.
	ClassMissing Class = observation.DataDirMissing
	// ClassEmpty: the data dir holds no member data; etcd would start a new member in it.
	ClassEmpty Class = observation.DataDirEmpty
	// ClassCorrupt: the member data is present but unusable.
	ClassCorrupt Class = observation.DataDirCorrupt
	// ClassForeign: the member data is intact but belongs to another member or cluster.
	ClassForeign Class = observation.DataDirForeign
	// ClassInUse: a running process (normally the member itself) holds the db lock.
	ClassInUse Class = observation.DataDirInUse
	// ClassStale: the member's own data, intact, but behind the progress
	// the member was seen to keep (Expect.HighWater): it went back in time.
	ClassStale Class = observation.DataDirStale
	// ClassNotADirectory: the data dir path is a file or another
	// non-directory; it holds no member data and is quarantined as it is.
	ClassNotADirectory Class = observation.DataDirNotADirectory
)

// AllClasses lists every class in a stable order (used for one-hot metrics).
func AllClasses() []Class {
	return []Class{ClassOK, ClassMissing, ClassEmpty, ClassCorrupt, ClassForeign, ClassInUse, ClassStale, ClassNotADirectory}
}

// Expect says what identity the data dir must carry; zero values mean
// "unknown, don't check".
type Expect struct {
	MemberID  uint64
	ClusterID uint64
	// HighWater, when its MemberID is set, is the progress that member was
	// seen to keep: its data dir ending before it is ClassStale.
	HighWater HighWater
}

// HighWater is the raft term and index member MemberID was seen to reach.
type HighWater struct {
	MemberID, Term, Index uint64
}

// Result is the outcome of inspecting a data dir.
type Result struct {
	Class Class
	// Detail is human readable and says what is wrong and where.
	Detail string
	// MemberID and ClusterID come from the WAL metadata when readable.
	MemberID, ClusterID uint64
	// ConsistentIndex comes from the db when readable (0 otherwise).
	ConsistentIndex uint64
	// WALTerm and WALIndex are the raft term the WAL's last hard state
	// records and the index of its last entry, when read.
	WALTerm, WALIndex uint64
	// WALCommit is the commit index of the WAL's last hard state, when
	// read: the entries a restore from this data dir keeps.
	WALCommit uint64 `json:",omitempty"`
	// Revision is the db's newest revision, when read (its check passed).
	Revision int64 `json:",omitempty"`
	// Verified: Classify's checks finished, so the class is confirmed. The
	// layout check alone (ClassifyLayout, or a deep check that could not
	// finish) leaves it false: its corrupt can be a member bootstrapping.
	Verified bool `json:",omitempty"`
	// KVHash is etcd's HashKV of the db (HashDBIsolated only).
	KVHash *KVHash `json:",omitempty"`
}
