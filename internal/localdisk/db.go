package localdisk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// dbLockTimeout bounds the wait for bbolt's shared flock. A running member
// holds the exclusive flock for its whole lifetime, so waiting longer only
// delays the in-use verdict.
const dbLockTimeout = 200 * time.Millisecond

// errDBLocked means another process (normally the running member) holds the
// db's exclusive flock.
var errDBLocked = errors.New("db is locked by another process")

// openDBReadOnly opens the bbolt file without any chance of writing to it:
// ReadOnly makes bbolt use O_RDONLY (no O_CREATE) and a shared flock. The
// caller must have rejected zero-length files, which bbolt would otherwise
// try to initialise.
func openDBReadOnly(path string, lockTimeout time.Duration) (*bolt.DB, error) {
	// bbolt treats Timeout 0 as "wait forever".
	lockTimeout = max(lockTimeout, time.Nanosecond)
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, errDBLocked
	}
	return db, err
}

// dbLocked reports whether another process holds the db file's flock (the
// lock bbolt, and so a running etcd, takes). It never waits and works on a
// file bbolt could not open (zero-length, garbage): a member bootstrapping
// holds the lock from the moment it creates the file.
func dbLocked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}

// checkDB runs bbolt's consistency check and returns the consistent index.
//
// Beware: etcd opens its db with NoFreelistSync (on Linux), so the freelist
// is rebuilt by walking the tree the first time it is needed (here, inside
// tx.Check), and bbolt panics on any problem that walk finds from a
// goroutine of its own. No recover can catch that; it is why this only runs
// in the inspection child process (see isolate.go).
func checkDB(db *bolt.DB) (consistentIndex uint64, err error) {
	tx, err := db.Begin(false)
	if err != nil {
		return 0, fmt.Errorf("begin read tx: %w", err)
	}
	defer tx.Rollback()

	consistentIndex, _ = schema.UnsafeReadConsistentIndex(TxReader{Tx: tx})

	var first error
	problems := 0
	// Check keeps sending until done; always drain so its goroutine exits.
	for e := range tx.Check() {
		if first == nil {
			first = e
		}
		problems++
	}
	if first != nil {
		return consistentIndex, fmt.Errorf("bbolt consistency check found %d problem(s), first: %w", problems, first)
	}
	return consistentIndex, nil
}

// lastRevision is the db's newest revision (the key bucket's last key):
// what the member's data holds, for a person choosing a survivor (0 when
// none can be read).
func lastRevision(db *bolt.DB) int64 {
	var rev int64
	db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(schema.Key.Name())
		if b == nil {
			return nil
		}
		if k, _ := b.Cursor().Last(); len(k) >= 17 {
			rev = mvcc.BytesToRev(k).Main
		}
		return nil
	})
	return rev
}

// TxReader lets etcd's schema package (written against its backend) read
// straight from a plain read-only bbolt transaction; etcd's own backend
// would open the file for writing.
type TxReader struct{ Tx *bolt.Tx }

func (r TxReader) UnsafeRange(bucket backend.Bucket, key, endKey []byte, limit int64) (keys, vals [][]byte) {
	b := r.Tx.Bucket(bucket.Name())
	if b == nil {
		return nil, nil
	}
	if len(endKey) == 0 {
		if v := b.Get(key); v != nil {
			return [][]byte{key}, [][]byte{v}
		}
		return nil, nil
	}
	c := b.Cursor()
	for k, v := c.Seek(key); k != nil && bytes.Compare(k, endKey) < 0; k, v = c.Next() {
		keys, vals = append(keys, k), append(vals, v)
		if limit > 0 && int64(len(keys)) >= limit {
			break
		}
	}
	return keys, vals
}

func (r TxReader) UnsafeForEach(bucket backend.Bucket, visitor func(k, v []byte) error) error {
	b := r.Tx.Bucket(bucket.Name())
	if b == nil {
		return nil
	}
	return b.ForEach(visitor)
}
