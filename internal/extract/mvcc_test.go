package extract

import (
	"bytes"
	"context"
	"testing"
)

// A compaction at a delete keeps the tombstone (the record at the compact
// revision) but drops the put before it: the key is gone, the deletion and
// the compaction are still known, and the revision counts both.
func TestCompactionAtADeleteLeavesTheKeyGoneAndTheRevisionKnown(t *testing.T) {
	db := newEtcdDB(t)
	db.put("/registry/configmaps/default/kept", []byte("{}"))
	db.put("/registry/configmaps/default/gone", []byte("{}"))
	deleted := db.del("/registry/configmaps/default/gone")
	db.compact(deleted)

	opened, err := Open(context.Background(), Source{DataDir: db.dataDir}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	c, err := opened.Read(func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	if c.Revision != deleted || c.CompactRevision != deleted || len(c.KVs) != 1 || string(c.KVs[0].Key) != "/registry/configmaps/default/kept" ||
		c.DeletedAt["/registry/configmaps/default/gone"] != deleted {
		t.Errorf("revision %d, compacted at %d, %d keys, deleted %v; want revision %d, compacted at %d, only kept, gone deleted",
			c.Revision, c.CompactRevision, len(c.KVs), c.DeletedAt, deleted, deleted)
	}
}
