package localdisk

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Classify inspects dataDir without modifying it.
//
// Problems are reported in this order, first one wins: the agent's marked
// skeleton (corrupt, confirmed: SkeletonMarkerName), in-use (db flock
// held by another process, also when the layout is broken: a member
// bootstrapping has its db before its WAL), layout (see ClassifyLayout), WAL
// unreadable, identity mismatch with expect (foreign), db integrity, and
// finally the db having applied entries the WAL no longer holds.
//
// The in-use check (bbolt's shared flock) runs here; the deep checks run in
// a child process (see isolate.go) because bbolt can crash the whole process
// on a damaged db. If ctx ends first, the child does not finish within its
// own deadline (inspectTimeout, whatever ctx allows), or it cannot be run,
// Classify returns the layout verdict with a Detail saying the contents
// are unverified, and Verified false.
func Classify(ctx context.Context, d Dirs, expect Expect) Result {
	dataDir := d.Data
	layout := ClassifyLayout(d)
	if layout.Class == ClassMissing || layout.Class == ClassEmpty || layout.Class == ClassNotADirectory {
		return verified(layout) // nothing more to read
	}
	if err := ctx.Err(); err != nil {
		return unverified(layout, err)
	}
	dbPath := filepath.Join(dataDir, dbRelPath)
	if layout.Class != ClassOK && skeletonMarked(dataDir) {
		// The agent's skeleton: corrupt for sure, also while the etcd that
		// serves from the wiped files holds a db it renamed into it (a
		// defrag, a received snapshot), which is not in-use (usable).
		return verified(layout)
	}
	if layout.Class != ClassOK {
		// A bootstrapping member has its db before its WAL: a broken layout
		// whose db a process holds is in use, not (yet) corrupt.
		if dbLocked(dbPath) {
			return verified(inUse(dbPath, d.WALDir()))
		}
		return verified(layout)
	}

	db, err := openDBGuarded(dbPath, lockTimeout(ctx))
	if errors.Is(err, errDBLocked) {
		return verified(inUse(dbPath, d.WALDir()))
	}
	if err != nil {
		return verified(corruptf("open %s: %v", dbPath, err))
	}
	// Our shared flock stops the member from starting (and writing the WAL)
	// while the child inspects; the child takes its own shared flock.
	defer db.Close()

	r, err := runInspection(ctx, inspectRequest{
		DataDir:     dataDir,
		WALDir:      d.WAL,
		Expect:      expect,
		LockTimeout: lockTimeout(ctx),
	})
	if err != nil {
		return unverified(layout, err)
	}
	return verified(r)
}

func verified(r Result) Result {
	r.Verified = true
	return r
}

// openDBGuarded is openDBReadOnly with panics turned into errors. Opening
// read-only without preloading the freelist only reads and validates the
// meta pages on this goroutine, so recovering here is enough.
func openDBGuarded(path string, lockTimeout time.Duration) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return openDBReadOnly(path, lockTimeout)
}

// identityMismatch returns "" when the found IDs satisfy expect, otherwise a
// phrase saying which ID was found versus expected.
func identityMismatch(memberID, clusterID uint64, expect Expect) string {
	var msg string
	if expect.MemberID != 0 && expect.MemberID != memberID {
		msg = fmt.Sprintf("names member %x, expected %x", memberID, expect.MemberID)
	}
	if expect.ClusterID != 0 && expect.ClusterID != clusterID {
		if msg != "" {
			msg += " and "
		}
		msg += fmt.Sprintf("names cluster %x, expected %x", clusterID, expect.ClusterID)
	}
	return msg
}

// lockTimeout is dbLockTimeout, cut to half of what is left of ctx so that
// an in-use verdict still arrives before a short deadline.
func lockTimeout(ctx context.Context) time.Duration {
	t := dbLockTimeout
	if deadline, ok := ctx.Deadline(); ok {
		t = min(t, time.Until(deadline)/2)
	}
	return t
}

func unverified(layout Result, err error) Result {
	layout.Detail = fmt.Sprintf("%s; deep check not finished: %v", layout.Detail, err)
	return layout
}
