package extract

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	etcdschema "go.etcd.io/etcd/server/v3/storage/schema"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// extract reads a db nobody vouches for: a damaged member's, or a snapshot
// file handed over by someone. These targets fuzz its decoders: stored
// values (FuzzDecodeValue, FuzzEncoding), keys and selectors
// (FuzzKeyAndSelector), the "key" bucket's revisions (FuzzRead), the
// snapshot file's sha256 trailer (FuzzSnapshotHash) and the check child's
// answer (FuzzChildOutput). Seeds are the values the package's fixture
// stores (extract_test.go).

// storedValueSeeds are values as the fixture's API server stores them.
func storedValueSeeds(f *testing.F) [][]byte {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s1", UID: "uid-s1"},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("hunter2")}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Labels: map[string]string{"role": "control-plane"}}}
	return [][]byte{
		protobuf(f, configMap("kube-system", "cm1", map[string]string{"a": "2"})),
		protobuf(f, secret),
		protobuf(f, node),
		[]byte(widgetJSON),
		[]byte(masterleaseValue),
		append([]byte(fakeAESCBCPrefix), xorWith(protobuf(f, secret))...),
		[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"d","creationTimestamp":"2026-01-02T03:04:05Z"},"data":{"k":"v"}}`),
		[]byte("  \n{\"kind\":\"Widget\"}"),
		[]byte("k8s:enc:kms:v2:key"),
		[]byte("outside the prefix"),
	}
}

// FuzzEncoding: every value has one of the listed encodings; an
// encrypted one names its provider (no ":"), and its prefix is the
// value's own start, at most 512 bytes, up to a ":".
func FuzzEncoding(f *testing.F) {
	for _, v := range storedValueSeeds(f) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		enc := Encoding(v)
		provider, prefix := encryptionPrefix(v)
		switch {
		case enc == EncodingProtobuf, enc == EncodingJSON, enc == EncodingUnknown:
			if bytes.HasPrefix(v, encryptedMagic) {
				t.Fatalf("%q: encoding %s for an encrypted value", v, enc)
			}
		case strings.HasPrefix(enc, encodingEncrypted):
			if enc != encodingEncrypted+provider || provider == "" || strings.Contains(provider, ":") {
				t.Fatalf("%q: encoding %q, provider %q", v, enc, provider)
			}
		default:
			t.Fatalf("%q: encoding %q", v, enc)
		}
		if !bytes.HasPrefix(v, []byte(prefix)) || len(prefix) > 512 || prefix != "" && !strings.HasSuffix(prefix, ":") {
			t.Fatalf("%q: prefix %q", v, prefix)
		}
	})
}

// FuzzDecodeValue: a stored value decodes to an object with a kind, or to
// an error; an encrypted one is never decoded without a decrypter. An
// object decoded prints as JSON and YAML, and its JSON decodes again to
// the same JSON.
func FuzzDecodeValue(f *testing.F) {
	for _, v := range storedValueSeeds(f) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		ref := ParseKey(DefaultPrefix, "/registry/configmaps/default/x")
		obj, err := decoder{}.decode(context.Background(), ref, &mvccpb.KeyValue{Key: []byte(ref.Key), Value: v, ModRevision: 7})
		if bytes.HasPrefix(v, encryptedMagic) {
			if err == nil || !strings.Contains(err.Error(), "encrypted at rest") {
				t.Fatalf("an encrypted value without a decrypter: %v", err)
			}
			return
		}
		if err != nil {
			if obj != nil {
				t.Fatalf("an error (%v) with an object %v", err, obj)
			}
			return
		}
		if enc := Encoding(v); enc != EncodingProtobuf && enc != EncodingJSON {
			t.Fatalf("decoded a value of encoding %s", enc)
		}
		if obj.GetObjectKind().GroupVersionKind().Kind == "" {
			t.Fatalf("decoded %q to an object without a kind: %#v", v, obj)
		}
		for _, format := range []string{OutputJSON, OutputYAML} {
			if err := printObject(&bytes.Buffer{}, format, obj); err != nil {
				t.Fatalf("decoded %q, cannot print it as %s: %v", v, format, err)
			}
		}
		j1, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		obj2, err := decodeValue(j1)
		if err != nil {
			t.Fatalf("decoded %q, its JSON %s does not decode: %v", v, j1, err)
		}
		j2, _ := json.Marshal(obj2)
		var a, b any
		if json.Unmarshal(j1, &a) != nil || json.Unmarshal(j2, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("JSON round trip of %q:\n%s\n%s", v, j1, j2)
		}
	})
}

// FuzzKeyAndSelector: any key splits into a Ref of that key; a selector
// naming one object names a key that splits back into it, which the
// selector matches; what a listing prints (Ref.String) selects its key
// again whenever it has no empty segment and the key is under the
// resource's storage path.
func FuzzKeyAndSelector(f *testing.F) {
	for _, k := range []string{"/registry/secrets/kube-system/bootstrap-token-abcdef", "/registry/minions/node1",
		"/registry/services/specs/default/kubernetes", "/registry/services/endpoints/default/kubernetes",
		"/registry/ingress/default/web", "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com",
		"/registry/example.com/widgets/default/w1", "/registry/masterleases/10.0.0.1", "compact_rev_key", "/registry/a/b/c/d/e"} {
		f.Add("/registry", k, "configmaps/kube-system/cm1")
	}
	for _, s := range []string{"", "nodes/n1", "services", "example.com/widgets/default/w1", "a/b/c/d", "configmaps//x", "/secrets", "ingresses/default/web"} {
		f.Add("", "/registry/configmaps/default/x", s)
	}
	f.Fuzz(func(t *testing.T, prefix, key, s string) {
		ref := ParseKey(prefix, key)
		if ref.Key != key {
			t.Fatalf("ParseKey(%q, %q).Key = %q", prefix, key, ref.Key)
		}
		ref.GroupResource()
		p := normalizePrefix(prefix)
		if !ref.odd && strings.HasPrefix(key, p) && !strings.Contains(ref.String(), "//") && !strings.HasSuffix(ref.String(), "/") &&
			!strings.HasPrefix(ref.String(), "/") {
			// A stray key at a resource's name where the API server keeps it
			// elsewhere (/registry/services/x, not services/specs/x) lists
			// like the real object: no selector reaches it.
			sel, err := ParseSelector(ref.String())
			if err == nil && strings.HasPrefix(key, sel.KeyPrefix(prefix)) && sel.Key(prefix) != key {
				t.Fatalf("key %q (prefix %q) lists as %q, which selects %q", key, prefix, ref.String(), sel.Key(prefix))
			}
		}

		sel, err := ParseSelector(s)
		if err != nil {
			return
		}
		if s != "" && (sel.Resource == "" || strings.Contains(sel.Resource+sel.Namespace+sel.Name, "//")) {
			t.Fatalf("ParseSelector(%q) = %+v", s, sel)
		}
		if !strings.HasPrefix(sel.KeyPrefix(prefix), p) {
			t.Fatalf("selector %q: key prefix %q outside %q", s, sel.KeyPrefix(prefix), p)
		}
		if !sel.One() {
			return
		}
		k := sel.Key(prefix)
		if !sel.Matches(prefix, k) {
			t.Fatalf("selector %q does not match its own key %q", s, k)
		}
		back := ParseKey(prefix, k)
		if back.Resource != sel.Resource || back.Namespace != sel.Namespace || back.Name != sel.Name {
			t.Fatalf("selector %q names key %q, which reads as %+v", s, k, back)
		}
	})
}

// fuzzEntry is one record of the "key" bucket the fuzzer writes.
type fuzzEntry struct{ k, v []byte }

// entriesFrom turns fuzz data into key-bucket records: mostly well-formed
// revisions of a few keys (puts and tombstones, as etcd writes them), some
// raw (any key, any value).
func entriesFrom(data []byte) (entries []fuzzEntry, compact []byte) {
	next := func(n int) []byte {
		n = min(n, len(data))
		b := data[:n]
		data = data[n:]
		return b
	}
	for len(data) > 0 {
		op := next(1)[0]
		switch op % 8 {
		case 6: // a raw record
			k := next(int(op>>3) % 20)
			entries = append(entries, fuzzEntry{append([]byte{}, k...), append([]byte{}, next(int(op>>4))...)})
		case 7: // the finished-compaction mark, raw or as etcd writes it
			b := append([]byte{}, next(10)...)
			if op&0x80 == 0 && len(b) >= 2 {
				b = mvcc.RevToBytes(mvcc.Revision{Main: int64(binary.BigEndian.Uint16(b))}, mvcc.NewRevBytes())
			}
			compact = b
		default: // a put or a delete of one of four keys
			b := append(append([]byte{}, next(4)...), 0, 0, 0, 0)
			main, sub := int64(binary.BigEndian.Uint16(b))+1, int64(b[2]%4)
			rk := mvcc.RevToBytes(mvcc.Revision{Main: main, Sub: sub}, mvcc.NewRevBytes())
			kv := mvccpb.KeyValue{Key: []byte("/registry/configmaps/default/" + string(rune('a'+b[3]%4))), ModRevision: main}
			if op&0x10 != 0 {
				rk = append(rk, 't') // etcd's tombstone mark
			} else {
				kv.Value = append([]byte{}, next(int(op>>5))...)
			}
			v, _ := kv.Marshal()
			entries = append(entries, fuzzEntry{rk, v})
		}
	}
	return entries, compact
}

// wellFormedRev reports whether k is a revision as etcd writes it.
func wellFormedRev(k []byte) bool {
	return (len(k) == 17 || len(k) == 18) && k[8] == '_' && k[0]&0x80 == 0 && k[9]&0x80 == 0
}

// FuzzRead: the "key" bucket read back is what etcd would restore, stated
// as simply as possible: walking the records in key order, a key's latest
// put wins unless a tombstone follows it, the revision is the last
// record's (or the compaction's, if higher). A malformed record is an
// error saying so, never a panic caught on the way.
func FuzzRead(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 0x20, 0, 2, 0, 0, 0x10, 0, 3, 0, 0}, false)
	f.Add([]byte{0, 0, 1, 0, 1, 0, 0, 2, 0, 1, 0x10, 0, 2, 1, 1, 7, 0, 2}, true)
	f.Add([]byte{6 | 17<<3, 1, 2, 3}, false)
	path := filepath.Join(f.TempDir(), "db")
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { bdb.Close() })
	db := &DB{bolt: bdb, path: path}
	f.Fuzz(func(t *testing.T, data []byte, onlyA bool) {
		entries, compact := entriesFrom(data)
		err := bdb.Update(func(tx *bolt.Tx) error {
			for _, name := range [][]byte{etcdschema.Key.Name(), etcdschema.Meta.Name()} {
				if tx.Bucket(name) != nil {
					if err := tx.DeleteBucket(name); err != nil {
						return err
					}
				}
				if _, err := tx.CreateBucket(name); err != nil {
					return err
				}
			}
			kb := tx.Bucket(etcdschema.Key.Name())
			for _, e := range entries {
				if len(e.k) == 0 {
					continue // bbolt takes no empty key
				}
				if err := kb.Put(e.k, e.v); err != nil {
					return err
				}
			}
			if compact != nil {
				return tx.Bucket(etcdschema.Meta.Name()).Put(etcdschema.FinishedCompactKeyName, compact)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		match := func(key string) bool { return !onlyA || strings.HasSuffix(key, "/a") }
		got, err := db.Read(match)

		// The model: bbolt keeps records sorted by key, last write wins.
		recs := map[string][]byte{}
		for _, e := range entries {
			if len(e.k) > 0 {
				recs[string(e.k)] = e.v
			}
		}
		keys := make([]string, 0, len(recs))
		for k := range recs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		wantErr := compact != nil && !wellFormedRev(compact)
		rev, deleted, live := int64(1), map[string]int64{}, map[string]*mvccpb.KeyValue{}
		for _, k := range keys {
			var kv mvccpb.KeyValue
			if !wellFormedRev([]byte(k)) || kv.Unmarshal(recs[k]) != nil {
				wantErr = true
				break
			}
			rev = int64(binary.BigEndian.Uint64([]byte(k)[:8]))
			if !match(string(kv.Key)) {
				continue
			}
			if len(k) == 18 && k[17] == 't' {
				delete(live, string(kv.Key))
				deleted[string(kv.Key)] = rev
			} else {
				delete(deleted, string(kv.Key))
				live[string(kv.Key)] = &kv
			}
		}
		if err != nil && strings.Contains(err.Error(), "panic") {
			t.Fatalf("a malformed db is caught only by the panic guard: %v", err)
		}
		if wantErr {
			if err == nil {
				t.Fatalf("records %x, compaction %x: read without an error", keys, compact)
			}
			return
		}
		if err != nil {
			t.Fatalf("records %x: %v", keys, err)
		}
		if compact != nil {
			rev = max(rev, int64(binary.BigEndian.Uint64(compact[:8])))
		}
		if got.Revision != rev || len(got.KVs) != len(live) || len(got.DeletedAt) != len(deleted) {
			t.Fatalf("records %x: revision %d, %d live, %d deleted; want %d, %d, %d", keys, got.Revision, len(got.KVs), len(got.DeletedAt), rev, len(live), len(deleted))
		}
		for i, kv := range got.KVs {
			if i > 0 && string(got.KVs[i-1].Key) >= string(kv.Key) {
				t.Fatalf("KVs not sorted: %q before %q", got.KVs[i-1].Key, kv.Key)
			}
			if w := live[string(kv.Key)]; w == nil || !bytes.Equal(w.Value, kv.Value) || w.ModRevision != kv.ModRevision {
				t.Fatalf("%q: got %q@%d, want %v", kv.Key, kv.Value, kv.ModRevision, w)
			}
		}
		for k, r := range deleted {
			if got.DeletedAt[k] != r {
				t.Fatalf("%q deleted at %d, want %d", k, got.DeletedAt[k], r)
			}
		}
	})
}

// FuzzSnapshotHash: a snapshot file carries a sha256 trailer exactly when
// its size is 32 past a whole number of 512-byte sectors, and it matches
// exactly when it is the hash of the bytes before it. mode 1 makes a file
// whose trailer is right (data padded to sectors, its hash appended).
func FuzzSnapshotHash(f *testing.F) {
	f.Add([]byte("bbolt pages"), uint8(1))
	f.Add(make([]byte, 512+32), uint8(0))
	f.Add(make([]byte, 1024), uint8(0))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		if mode%2 == 1 {
			db := make([]byte, (len(data)/512+1)*512)
			copy(db, data)
			sum := sha256.Sum256(db)
			data = append(db, sum[:]...)
		}
		path := filepath.Join(t.TempDir(), "snapshot.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ok, present, err := snapshotHashMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		wantPresent := len(data)%512 == sha256.Size
		wantOK := false
		if wantPresent {
			sum := sha256.Sum256(data[:len(data)-sha256.Size])
			wantOK = bytes.Equal(sum[:], data[len(data)-sha256.Size:])
		}
		if present != wantPresent || ok != wantOK || mode%2 == 1 && !ok {
			t.Fatalf("%d bytes: ok %v present %v, want %v %v", len(data), ok, present, wantOK, wantPresent)
		}
	})
}

// FuzzChildOutput: the check child's answer is its stdout's last line;
// a crash is the runtime's one-line reason from its stderr, or nothing.
func FuzzChildOutput(f *testing.F) {
	f.Add([]byte("{\"Problem\":\"bbolt consistency check found 1 problem(s)\"}\n"))
	f.Add([]byte("noise\n{}\n\n"))
	f.Add([]byte("panic: invalid page type: 0: 4\n\ngoroutine 7 [running]:\n"))
	f.Add([]byte("unexpected fault address 0x7f\nfatal error: fault\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		last := lastLine(b)
		trimmed := bytes.TrimRight(b, "\n")
		if bytes.IndexByte(last, '\n') >= 0 || !bytes.HasSuffix(trimmed, last) {
			t.Fatalf("lastLine(%q) = %q", b, last)
		}
		var v checkVerdict
		if json.Unmarshal(last, &v) == nil {
			out, _ := json.Marshal(v)
			var again checkVerdict
			if err := json.Unmarshal(out, &again); err != nil || again != v {
				t.Fatalf("verdict %q: %+v, again %+v", last, v, again)
			}
		}
		want := ""
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSuffix(line, "\r")
			if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || strings.HasPrefix(line, "unexpected fault address") {
				want = line
				break
			}
		}
		if r := crashReason(b); r != want {
			t.Fatalf("crashReason(%q) = %q, want %q", b, r, want)
		}
	})
}
