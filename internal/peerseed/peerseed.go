// Package peerseed gets a copy of the cluster's data from a healthy peer
// for a member that is being rejoined (docs/design.md §6 step 3): it picks the
// peer (chosen by plan.PickSource), streams its Maintenance.Snapshot into local storage,
// verifying the sha256 that etcd appends to the stream (Stream), and checks
// that the result is a usable etcd db (VerifyDB).
//
// The streamed file is also the pre-change backup kept with the quarantine,
// so it is only ever created whole and verified: it is written under a
// ".part" name and renamed into place after the hash matched and the data
// reached the disk.
package peerseed

import (
	"errors"
	"time"
)

// Snapshot is a verified snapshot streamed from a peer.
type Snapshot struct {
	Path string
	// Copy is the path of a second copy of the db written during the
	// stream (AlsoCopyTo), "" when none was asked or it could not be
	// written (CopyErr says why). It is not fsynced: a caller that keeps it
	// syncs it (BuildDataDir does), and it is checked against SHA256 there.
	Copy    string
	CopyErr error
	// Size is the db's size in bytes, without the trailing hash.
	Size int64
	// SHA256 is the hex sha256 of the db, as the source sent it.
	SHA256 string
	// Version is the version the source sends with the snapshot
	// (SnapshotWithVersion): etcd 3.6 sends the db's storage version, e.g.
	// "3.6.0", which says which etcd can restore it.
	Version string
	// Source is the source member's name (its ID in hex, or the endpoint,
	// if the name could not be read).
	Source string
	Took   time.Duration
}

// Reasons a stream is refused (test with errors.Is).
var (
	// ErrHashMismatch: the trailing sha256 does not match the db bytes.
	ErrHashMismatch = errors.New("snapshot sha256 mismatch")
	// ErrTruncated: the stream ended early or broke off.
	ErrTruncated = errors.New("snapshot stream truncated")
	// ErrNoHash: the stream has a whole number of db sectors but no
	// trailing sha256, so its integrity cannot be checked.
	ErrNoHash = errors.New("snapshot stream has no trailing sha256")
	// ErrDiskFull: not enough free space for the snapshot.
	ErrDiskFull = errors.New("not enough free disk space for the snapshot")
)
