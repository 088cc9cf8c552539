package peerseed

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// VerifyDB opens a streamed db read-only and checks that it looks like an
// etcd db that has applied entries: the key and meta buckets exist and the
// meta bucket holds a consistent index. It returns that index and its term.
// This is a quick sanity check before trusting a snapshot, not a full
// consistency check (bbolt's tx.Check can crash the process on a damaged db
// from a goroutine of its own; localdisk runs it isolated in a child).
func VerifyDB(path string) (consistentIndex, term uint64, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, 0, err
	}
	// bbolt would try to initialise an empty file as a new db.
	if st.Size() == 0 {
		return 0, 0, fmt.Errorf("%s is empty", path)
	}
	// A damaged page can make bbolt panic on this goroutine; turn it into
	// an error.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: bbolt panicked: %v", path, p)
		}
	}()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, 0, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for _, b := range []backend.Bucket{schema.Key, schema.Meta} {
			if tx.Bucket(b.Name()) == nil {
				return fmt.Errorf("no %q bucket: not an etcd db", b.Name())
			}
		}
		// etcd reads both as 8-byte big-endian numbers (and panics on a
		// shorter value): say so rather than let the panic guard answer.
		meta := tx.Bucket(schema.Meta.Name())
		for _, k := range [][]byte{schema.MetaConsistentIndexKeyName, schema.MetaTermKeyName} {
			if v := meta.Get(k); v != nil && len(v) < 8 {
				return fmt.Errorf("malformed %s in the %q bucket: %d bytes, not 8", k, schema.Meta.Name(), len(v))
			}
		}
		consistentIndex, term = schema.UnsafeReadConsistentIndex(localdisk.TxReader{Tx: tx})
		if consistentIndex == 0 {
			return errors.New("no consistent index: the db has applied no entries")
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return consistentIndex, term, nil
}
