package extract

import (
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// etcdDB is a real etcd db written by etcd's own backend and MVCC store,
// as a member would write it (no etcd process, no hand-made encoding).
type etcdDB struct {
	t       *testing.T
	dataDir string
	be      backend.Backend
	kv      mvccStore
}

// mvccStore is the part of mvcc.NewStore's (unexported) result we use.
type mvccStore interface {
	Put(key, value []byte, lease lease.LeaseID) int64
	DeleteRange(key, end []byte) (n, rev int64)
	Compact(trace *traceutil.Trace, rev int64) (<-chan struct{}, error)
	Commit()
	Close() error
}

func newEtcdDB(t *testing.T) *etcdDB {
	t.Helper()
	dataDir := t.TempDir()
	path := filepath.Join(dataDir, dbRelPath)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	be := backend.NewDefaultBackend(zap.NewNop(), path)
	s := mvcc.NewStore(zap.NewNop(), be, &lease.FakeLessor{}, mvcc.StoreConfig{})
	db := &etcdDB{t: t, dataDir: dataDir, be: be, kv: s}
	t.Cleanup(db.close)
	return db
}

func (db *etcdDB) path() string { return filepath.Join(db.dataDir, dbRelPath) }

func (db *etcdDB) put(key string, value []byte) int64 {
	rev := db.kv.Put([]byte(key), value, lease.NoLease)
	db.kv.Commit()
	return rev
}

func (db *etcdDB) del(key string) int64 {
	n, rev := db.kv.DeleteRange([]byte(key), nil)
	if n != 1 {
		db.t.Fatalf("delete %s: %d keys deleted", key, n)
	}
	db.kv.Commit()
	return rev
}

func (db *etcdDB) compact(rev int64) {
	done, err := db.kv.Compact(traceutil.TODO(), rev)
	if err != nil {
		db.t.Fatal(err)
	}
	<-done
	db.kv.Commit()
}

// close releases the db (and its flock); safe to call twice.
func (db *etcdDB) close() {
	if db.kv == nil {
		return
	}
	db.kv.Close()
	db.be.Close()
	db.kv = nil
}

// snapshot writes what `etcdctl snapshot save` writes: the backend's
// snapshot followed by its sha256.
func (db *etcdDB) snapshot(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	snap := db.be.Snapshot()
	defer snap.Close()
	if _, err := snap.WriteTo(io.MultiWriter(f, h)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		t.Fatal(err)
	}
	return path
}

// protobuf encodes obj as the API server stores built-in types.
func protobuf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, gvks[0].GroupVersion()), obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": name}},
		Data:       data,
	}
}
