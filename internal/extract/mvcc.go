package extract

import (
	"fmt"
	"runtime/debug"
	"sort"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
)

// revKeyLen and markedRevKeyLen are the two lengths of a key in etcd's "key"
// bucket: 8-byte main revision, '_', 8-byte sub revision, and for a
// tombstone one more byte. mvcc.BytesToRev panics on anything else, so keys
// are checked with wellFormedRevision first.
const (
	revKeyLen       = 8 + 1 + 8
	markedRevKeyLen = revKeyLen + 1
)

// wellFormedRevision reports whether mvcc.BytesToRev reads b without a
// panic: either length, the '_' separator, and neither revision negative
// (as int64: the top bit of each half clear).
func wellFormedRevision(b []byte) bool {
	return (len(b) == revKeyLen || len(b) == markedRevKeyLen) && b[8] == '_' && b[0]&0x80 == 0 && b[9]&0x80 == 0
}

// Contents is the live state of the keys Read selected.
type Contents struct {
	// Revision is the db's current revision, as etcd would restore it.
	Revision int64
	// CompactRevision is the last finished compaction (0: none recorded).
	CompactRevision int64
	// KVs holds the latest live version of each selected key, sorted by key.
	KVs []*mvccpb.KeyValue
	// DeletedAt maps selected keys whose latest version is a tombstone still
	// in the db (deleted after the last compaction) to the deleting revision.
	DeletedAt map[string]int64
}

// Read walks the "key" bucket in revision order and keeps, for each key
// match accepts, its latest version: a tombstone removes it. This is how
// etcd rebuilds its index at startup (mvcc's restore), minus the index.
func (db *DB) Read(match func(key string) bool) (c *Contents, err error) {
	// The child's check passed, so nothing here should fault or panic; if
	// it does anyway, say so instead of crashing. PanicOnFault turns a
	// fault in bbolt's mmap into a panic recover can catch.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, unreadable(db.path, fmt.Errorf("panic while reading: %v", p))
		}
	}()
	err = db.bolt.View(func(tx *bolt.Tx) error {
		var rerr error
		c, rerr = readLatest(tx, match)
		return rerr
	})
	if err != nil {
		return nil, unreadable(db.path, err)
	}
	return c, nil
}

func readLatest(tx *bolt.Tx, match func(key string) bool) (*Contents, error) {
	b := tx.Bucket(schema.Key.Name())
	if b == nil {
		return nil, fmt.Errorf("no %q bucket: a bbolt file, but not an etcd v3 db", schema.Key.Name())
	}
	if tx.Bucket(schema.Meta.Name()) == nil {
		return nil, fmt.Errorf("no %q bucket: a bbolt file, but not an etcd v3 db", schema.Meta.Name())
	}
	// 1 is an empty store's revision in etcd too.
	c := &Contents{Revision: 1, DeletedAt: map[string]int64{}}
	latest := map[string]*mvccpb.KeyValue{}
	cur := b.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if !wellFormedRevision(k) {
			return nil, fmt.Errorf("%q bucket: malformed revision key %x", schema.Key.Name(), k)
		}
		rev := mvcc.BytesToRev(k)
		c.Revision = rev.Main // keys come in revision order
		var kv mvccpb.KeyValue
		if err := kv.Unmarshal(v); err != nil {
			return nil, fmt.Errorf("revision %d/%d: value is not an mvccpb.KeyValue: %w", rev.Main, rev.Sub, err)
		}
		key := string(kv.Key)
		if !match(key) {
			continue
		}
		if mvcc.IsTombstone(k) {
			delete(latest, key)
			c.DeletedAt[key] = rev.Main
			continue
		}
		delete(c.DeletedAt, key)
		latest[key] = &kv
	}
	if v := tx.Bucket(schema.Meta.Name()).Get(schema.FinishedCompactKeyName); v != nil && !wellFormedRevision(v) {
		return nil, fmt.Errorf("%q bucket: malformed finished compaction %x", schema.Meta.Name(), v)
	}
	if compacted, ok := mvcc.UnsafeReadFinishedCompact(localdisk.TxReader{Tx: tx}); ok {
		c.CompactRevision = compacted
		// As etcd's restore: the revision is never below the compaction's,
		// whatever records the compaction left.
		c.Revision = max(c.Revision, compacted)
	}
	c.KVs = make([]*mvccpb.KeyValue, 0, len(latest))
	for _, kv := range latest {
		c.KVs = append(c.KVs, kv)
	}
	sort.Slice(c.KVs, func(i, j int) bool { return string(c.KVs[i].Key) < string(c.KVs[j].Key) })
	return c, nil
}
