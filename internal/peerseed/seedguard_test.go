package peerseed

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v2store"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
)

// withStorageVersion is the fixture's db with meta/storageVersion set to v
// ("" removes it: a db written by etcd 3.5).
func withStorageVersion(t *testing.T, fx seedFixture, v string) string {
	t.Helper()
	return dbVariant(t, fx, func(p string) {
		updateMeta(t, p, func(b *bolt.Bucket) error {
			if v == "" {
				return b.Delete(schema.MetaStorageVersionName)
			}
			return b.Put(schema.MetaStorageVersionName, []byte(v))
		})
	}, true)
}

// Issue 40: a 3.5 learner reads its cluster version from the .snap, which
// is written from the db: a db without cluster/clusterVersion was seeded
// anyway, and the learner would start with no cluster version.
func TestASeedFromADbWithoutAClusterVersionIsRefused(t *testing.T) {
	fx := getSeedFixture(t)
	db := dbVariant(t, fx, func(p string) {
		bdb, err := bolt.Open(p, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer bdb.Close()
		if err := bdb.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(schema.Cluster.Name()).Delete(schema.ClusterClusterVersionKeyName)
		}); err != nil {
			t.Fatal(err)
		}
	}, true)
	dataDir := filepath.Join(t.TempDir(), "etcd")
	before := fileSHA256(t, db)
	_, err := BuildDataDir(db, dataDir, fx.learner, fx.cluster, zap.NewNop())
	if !errors.Is(err, ErrSeedNoClusterVersion) || SeedReason(err) != "no-cluster-version" {
		t.Fatalf("BuildDataDir = %v (%s), want %v", err, SeedReason(err), ErrSeedNoClusterVersion)
	}
	mustLeaveNoDataDir(t, dataDir)
	if fileSHA256(t, db) != before {
		t.Error("the streamed db changed")
	}
}

// Issue 40: etcd 3.5 never reads meta/storageVersion, so a 3.5 learner on a
// db a 3.6 cluster raised to 3.6 would run on a schema it does not know.
// The learner's version decides; unknown, the serving members' does; both
// unknown, the check is skipped.
func TestASeedWhoseStorageVersionIsNewerThanTheLearnersEtcdIsRefused(t *testing.T) {
	fx := getSeedFixture(t)
	tests := []struct {
		name             string
		storage          string
		learner, serving string
		refused          bool
	}{
		{name: "3.6 schema, 3.5 learner", storage: "3.6.0", learner: "3.5.36", refused: true},
		{name: "3.6 schema, learner unknown, 3.5 cluster", storage: "3.6.0", serving: "3.5.36", refused: true},
		{name: "3.7 schema, 3.6 learner from an image tag", storage: "3.7.0", learner: "v3.6.16-0", refused: true},
		{name: "unreadable storage version", storage: "three.six", learner: "3.6.16", refused: true},
		{name: "3.6 schema, 3.6 learner", storage: "3.6.0", learner: "3.6.16"},
		{name: "3.6 schema, 3.7 learner", storage: "3.6.0", learner: "3.7.3"},
		{name: "the learner's version wins over the cluster's", storage: "3.6.0", learner: "3.6.16", serving: "3.5.36"},
		{name: "3.5 db (no storage version), 3.5 learner", storage: "", learner: "3.5.36"},
		{name: "both versions unknown: skipped", storage: "3.6.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := withStorageVersion(t, fx, tt.storage)
			dataDir := filepath.Join(t.TempDir(), "etcd")
			_, err := BuildDataDir(db, dataDir, fx.learner, fx.cluster, zap.NewNop(),
				WithLearnerVersion(tt.learner), WithServingVersion(tt.serving))
			switch {
			case tt.refused && (!errors.Is(err, ErrSeedStorageVersionNewer) || SeedReason(err) != "storage-version-newer"):
				t.Fatalf("BuildDataDir = %v (%s), want %v", err, SeedReason(err), ErrSeedStorageVersionNewer)
			case tt.refused:
				t.Logf("refused: %v", err)
				mustLeaveNoDataDir(t, dataDir)
			case err != nil:
				t.Fatalf("BuildDataDir = %v, want built", err)
			}
		})
	}
}

// v2Edit decodes a v2 store, lets f change it, and encodes it again.
func v2Edit(t *testing.T, f func(st v2store.Store)) func([]byte) []byte {
	return func(data []byte) []byte {
		st := v2store.New("/0", "/1")
		if err := st.Recovery(data); err != nil {
			t.Errorf("v2 store: %v", err)
			return data
		}
		f(st)
		out, err := st.Save()
		if err != nil {
			t.Errorf("v2 store: %v", err)
		}
		return out
	}
}

// Issue 40: a 3.5 learner takes its membership from the .snap's v2 store
// and deletes db members the v2 store lacks. The read-back decodes the
// written .snap as etcd 3.5 does and refuses any difference from the db;
// before the guard each of these was seeded.
func TestAWrittenSnapWhoseV2StoreDiffersFromTheDbIsRefused(t *testing.T) {
	fx := getSeedFixture(t)
	perm := v2store.TTLOptionSet{ExpireTime: v2store.Permanent}
	must := func(_ *v2store.Event, err error) {
		if err != nil {
			t.Error(err)
		}
	}
	tests := []struct {
		name string
		edit func([]byte) []byte
	}{
		{name: "a voter missing", edit: v2Edit(t, func(st v2store.Store) {
			must(st.Delete(membership.MemberStoreKey(types.ID(fx.voter)), true, true))
		})},
		{name: "the learner a voter", edit: v2Edit(t, func(st v2store.Store) {
			key := membership.MemberStoreKey(types.ID(fx.learner)) + "/raftAttributes"
			e, err := st.Get(key, false, false)
			if err != nil {
				t.Fatal(err)
			}
			var ra membership.RaftAttributes
			if err := json.Unmarshal([]byte(*e.Node.Value), &ra); err != nil {
				t.Fatal(err)
			}
			ra.IsLearner = false
			b, _ := json.Marshal(ra)
			must(st.Set(membership.MemberStoreKey(types.ID(fx.learner))+"/raftAttributes", false, string(b), perm))
		})},
		{name: "a member's peer URL", edit: v2Edit(t, func(st v2store.Store) {
			b, _ := json.Marshal(membership.RaftAttributes{PeerURLs: []string{"http://127.0.0.99:2380"}})
			must(st.Set(membership.MemberStoreKey(types.ID(fx.voter))+"/raftAttributes", false, string(b), perm))
		})},
		{name: "a removed ID the db lacks", edit: v2Edit(t, func(st v2store.Store) {
			must(st.Create(membership.RemovedMemberStoreKey(types.ID(0xbad)), false, "", false, perm))
		})},
		{name: "another cluster version", edit: v2Edit(t, func(st v2store.Store) {
			must(st.Set(membership.StoreClusterVersionKey(), false, "3.4.0", perm))
		})},
		{name: "custom v2 data", edit: v2Edit(t, func(st v2store.Store) {
			must(st.Create("/1/foo", false, "bar", false, perm))
		})},
		{name: "not a v2 store", edit: func([]byte) []byte { return []byte("{not json") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "etcd")
			_, err := BuildDataDir(fx.db, dataDir, fx.learner, fx.cluster, zap.NewNop(), withV2Data(tt.edit))
			if !errors.Is(err, ErrSeedV2SnapshotMismatch) || SeedReason(err) != "v2-snapshot-mismatch" {
				t.Fatalf("BuildDataDir = %v (%s), want %v", err, SeedReason(err), ErrSeedV2SnapshotMismatch)
			}
			t.Logf("refused: %v", err)
			mustLeaveNoDataDir(t, dataDir)
		})
	}
	// Unchanged, the same build passes the read-back.
	if _, err := BuildDataDir(fx.db, filepath.Join(t.TempDir(), "etcd"), fx.learner, fx.cluster, zap.NewNop(), withV2Data(func(b []byte) []byte { return b })); err != nil {
		t.Fatalf("unaltered: %v", err)
	}
}

func TestMajorMinor(t *testing.T) {
	for in, want := range map[string][2]int{"3.5.36": {3, 5}, "v3.6.16-0": {3, 6}, "3.6.0": {3, 6}, "3.7": {3, 7}, "3.10.1-rc.0": {3, 10}} {
		if ma, mi, ok := majorMinor(in); !ok || ma != want[0] || mi != want[1] {
			t.Errorf("majorMinor(%q) = %d %d %v, want %v", in, ma, mi, ok, want)
		}
	}
	for _, in := range []string{"", "3", "latest", "three.six", "3.x.1"} {
		if _, _, ok := majorMinor(in); ok {
			t.Errorf("majorMinor(%q) ok", in)
		}
	}
}
