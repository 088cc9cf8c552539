package extract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// fixture is an etcd db with a history: puts, an overwrite, deletes before
// and after a compaction, and values that are not plain objects.
type fixture struct {
	db *etcdDB
	// revisions of the interesting writes
	cm1Rev, secretRev, nodeRev, widgetRev, lateDeleteRev, lastRev int64
	cm1                                                           *corev1.ConfigMap
	secret                                                        *corev1.Secret
	node                                                          *corev1.Node
	encryptedSecret                                               *corev1.Secret
}

const (
	widgetJSON       = `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default","uid":"uid-w1"},"spec":{"size":3}}`
	masterleaseValue = "\x01\x02not an object"
	// fakeAESCBCPrefix is what the aescbc provider puts before its output.
	fakeAESCBCPrefix = "k8s:enc:aescbc:v1:key1:"
)

// xorWith is the test's stand-in cipher behind fakeAESCBCPrefix.
func xorWith(b []byte) []byte {
	out := make([]byte, len(b))
	for i := range b {
		out[i] = b[i] ^ 0x5a
	}
	return out
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{db: newEtcdDB(t)}
	db := f.db
	db.put("/registry/configmaps/kube-system/cm1", protobuf(t, configMap("kube-system", "cm1", map[string]string{"a": "1"})))
	f.secret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s1", UID: "uid-s1"},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"password": []byte("hunter2")},
	}
	f.secretRev = db.put("/registry/secrets/default/s1", protobuf(t, f.secret))
	db.put("/registry/minions/n1", protobuf(t, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1"}}))
	f.widgetRev = db.put("/registry/example.com/widgets/default/w1", []byte(widgetJSON))
	db.put("/registry/configmaps/default/gone-early", protobuf(t, configMap("default", "gone-early", nil)))
	db.del("/registry/configmaps/default/gone-early")
	f.cm1 = configMap("kube-system", "cm1", map[string]string{"a": "2"})
	f.cm1Rev = db.put("/registry/configmaps/kube-system/cm1", protobuf(t, f.cm1))
	db.compact(f.cm1Rev) // drops cm1's first version and gone-early with its tombstone

	db.put("/registry/configmaps/default/gone-late", protobuf(t, configMap("default", "gone-late", nil)))
	f.lateDeleteRev = db.del("/registry/configmaps/default/gone-late")
	f.node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1", Labels: map[string]string{"role": "control-plane"}}}
	f.nodeRev = db.put("/registry/minions/n1", protobuf(t, f.node))
	db.put("/registry/masterleases/10.0.0.1", []byte(masterleaseValue))
	f.encryptedSecret = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "enc1", UID: "uid-enc1"},
		Data:       map[string][]byte{"token": []byte("abcdef.0123456789abcdef")},
	}
	db.put("/registry/secrets/kube-system/enc1", append([]byte(fakeAESCBCPrefix), xorWith(protobuf(t, f.encryptedSecret))...))
	f.lastRev = db.put("compact_rev_key", []byte("outside the prefix"))
	return f
}

// run opens the fixture's data dir and runs o, returning stdout and stderr.
func (f *fixture) run(t *testing.T, o Options) (stdout, stderr string, err error) {
	t.Helper()
	var out, log bytes.Buffer
	db, err := Open(context.Background(), Source{DataDir: f.db.dataDir}, &log)
	if err != nil {
		t.Fatalf("open: %v\n%s", err, log.String())
	}
	defer db.Close()
	if o.Output == "" {
		o.Output = OutputYAML
	}
	o.Out, o.Log = &out, &log
	err = Run(context.Background(), db, o)
	return out.String(), log.String(), err
}

// tableRows parses the table into its fields, header first.
func tableRows(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestListingShowsExactlyTheLiveKeysWithTheirEncodings(t *testing.T) {
	f := newFixture(t)
	out, log, err := f.run(t, Options{Output: OutputTable})
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	want := [][]string{
		{"RESOURCE", "NAMESPACE", "NAME", "MOD-REVISION", "BYTES", "ENCODING"},
		{"configmaps", "kube-system", "cm1", fmt.Sprint(f.cm1Rev), "*", "protobuf"},
		{"example.com/widgets", "default", "w1", fmt.Sprint(f.widgetRev), fmt.Sprint(len(widgetJSON)), "json"},
		{"masterleases", "-", "10.0.0.1", "*", fmt.Sprint(len(masterleaseValue)), "unknown"},
		{"nodes", "-", "n1", fmt.Sprint(f.nodeRev), "*", "protobuf"},
		{"secrets", "default", "s1", fmt.Sprint(f.secretRev), "*", "protobuf"},
		{"secrets", "kube-system", "enc1", "*", "*", "encrypted:aescbc"},
	}
	got := tableRows(out)
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), out)
	}
	for i := range want {
		for j := range want[i] {
			if want[i][j] != "*" && (j >= len(got[i]) || got[i][j] != want[i][j]) {
				t.Fatalf("line %d: got %v, want %v\n%s", i, got[i], want[i], out)
			}
		}
	}
	if wantLog := fmt.Sprintf("revision %d, compacted at %d", f.lastRev, f.cm1Rev); !strings.Contains(log, wantLog) {
		t.Errorf("log lacks %q:\n%s", wantLog, log)
	}
}

func TestGetReturnsTheLatestVersionAsWrittenWithTypeAndRevision(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		selector string
		want     any
		rev      int64
	}{
		{"configmaps/kube-system/cm1", f.cm1, f.cm1Rev},
		{"nodes/n1", f.node, f.nodeRev},
		{"minions/n1", f.node, f.nodeRev}, // the storage name works too
		{"secrets/default/s1", f.secret, f.secretRev},
	} {
		for _, format := range []string{OutputYAML, OutputJSON} {
			out, log, err := f.run(t, Options{Selector: tc.selector, Output: format})
			if err != nil {
				t.Fatalf("%s -o %s: %v\n%s", tc.selector, format, err, log)
			}
			want := reflect.New(reflect.TypeOf(tc.want).Elem()).Interface()
			got := reflect.New(reflect.TypeOf(tc.want).Elem()).Interface()
			wantJSON, _ := json.Marshal(tc.want)
			json.Unmarshal(wantJSON, want)
			setTypeAndRevision(t, want, tc.rev)
			if err := yaml.Unmarshal([]byte(out), got); err != nil { // YAML is a superset of JSON
				t.Fatalf("%s -o %s: %v\n%s", tc.selector, format, err, out)
			}
			if !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("%s -o %s: got\n%s\nwant %+v", tc.selector, format, out, want)
			}
		}
	}
}

// setTypeAndRevision sets what the API server (and so extract) adds to a
// stored object: apiVersion, kind, and the mod revision as resourceVersion.
func setTypeAndRevision(t *testing.T, obj any, rev int64) {
	t.Helper()
	rv := fmt.Sprint(rev)
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		o.TypeMeta, o.ResourceVersion = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, rv
	case *corev1.Node:
		o.TypeMeta, o.ResourceVersion = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, rv
	case *corev1.Secret:
		o.TypeMeta, o.ResourceVersion = metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, rv
	default:
		t.Fatalf("no TypeMeta for %T", obj)
	}
}

func TestCustomResourceStoredAsJSONComesBackUnstructured(t *testing.T) {
	f := newFixture(t)
	out, log, err := f.run(t, Options{Selector: "example.com/widgets/default/w1", Output: OutputJSON})
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	var got, want map[string]any
	json.Unmarshal([]byte(widgetJSON), &want)
	want["metadata"].(map[string]any)["resourceVersion"] = fmt.Sprint(f.widgetRev)
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

func TestSeveralObjectsPrintAsAListAndUndecodableOnesAreSkippedWithANote(t *testing.T) {
	f := newFixture(t)
	out, log, err := f.run(t, Options{Selector: "secrets", Output: OutputYAML})
	if err == nil || !strings.Contains(err.Error(), "1 of 2 object(s) could not be decoded") {
		t.Fatalf("want an error counting the skipped encrypted secret, got %v", err)
	}
	if !strings.Contains(log, "skipped secrets/kube-system/enc1") || !strings.Contains(log, "encrypted at rest ("+fakeAESCBCPrefix+")") {
		t.Errorf("no note naming the skipped object and its provider:\n%s", log)
	}
	var list struct {
		APIVersion, Kind string
		Items            []corev1.Secret
	}
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := f.secret.DeepCopy()
	setTypeAndRevision(t, want, f.secretRev)
	if list.APIVersion != "v1" || list.Kind != "List" || len(list.Items) != 1 || !apiequality.Semantic.DeepEqual(&list.Items[0], want) {
		t.Errorf("got\n%s", out)
	}

	// Keys that are not objects do not stop a listing of their resource either.
	out, _, err = f.run(t, Options{Selector: "masterleases", Output: OutputJSON})
	if err == nil || !strings.Contains(out, `"kind": "List"`) {
		t.Errorf("masterleases: %v\n%s", err, out)
	}
}

func TestNameOutputListsWithoutDecoding(t *testing.T) {
	f := newFixture(t)
	out, log, err := f.run(t, Options{Selector: "secrets", Output: OutputName})
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if want := "secrets/default/s1\nsecrets/kube-system/enc1\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
	out, _, err = f.run(t, Options{Selector: "nodes/n1", Output: OutputName})
	if err != nil || out != "nodes/n1\n" {
		t.Errorf("got %q, %v", out, err)
	}
}

func TestDeletedAndMissingObjectsAreNotFoundNamingTheKey(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		selector, key string
		deletedAt     int64
	}{
		{"configmaps/default/gone-late", "/registry/configmaps/default/gone-late", f.lateDeleteRev},
		{"configmaps/default/gone-early", "/registry/configmaps/default/gone-early", 0}, // compacted away
		{"configmaps/nope", "/registry/configmaps/nope", 0},
		{"services/default/kubernetes", "/registry/services/specs/default/kubernetes", 0},
	} {
		_, _, err := f.run(t, Options{Selector: tc.selector})
		var nf *NotFoundError
		if !errors.As(err, &nf) || nf.Key != tc.key || nf.DeletedAt != tc.deletedAt || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: got %v (%+v), want not found at key %s deleted at %d", tc.selector, err, nf, tc.key, tc.deletedAt)
		}
	}
}

func TestEncryptedValueIsShownWithADecrypterAndReportedWithout(t *testing.T) {
	f := newFixture(t)
	const sel = "secrets/kube-system/enc1"
	_, _, err := f.run(t, Options{Selector: sel})
	if err == nil || !strings.Contains(err.Error(), "encrypted at rest ("+fakeAESCBCPrefix+")") {
		t.Fatalf("without a decrypter: %v", err)
	}

	var gotKey string
	var gotGR schema.GroupResource
	decrypt := func(_ context.Context, key []byte, gr schema.GroupResource, v []byte) ([]byte, error) {
		gotKey, gotGR = string(key), gr
		return xorWith(bytes.TrimPrefix(v, []byte(fakeAESCBCPrefix))), nil
	}
	out, log, err := f.run(t, Options{Selector: sel, Decrypt: decrypt})
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if gotKey != "/registry/secrets/kube-system/enc1" || gotGR != (schema.GroupResource{Resource: "secrets"}) {
		t.Errorf("decrypter got key %q and %v: want the etcd key (the API server's authenticated data) and core secrets", gotKey, gotGR)
	}
	var got corev1.Secret
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := f.encryptedSecret.DeepCopy()
	setTypeAndRevision(t, want, f.lastRev-1)
	if !apiequality.Semantic.DeepEqual(&got, want) {
		t.Errorf("got\n%s", out)
	}

	failing := func(context.Context, []byte, schema.GroupResource, []byte) ([]byte, error) {
		return nil, errors.New("no key named key1")
	}
	if _, _, err := f.run(t, Options{Selector: sel, Decrypt: failing}); err == nil || !strings.Contains(err.Error(), "no key named key1") {
		t.Errorf("failing decrypter: %v", err)
	}
}

func TestSnapshotFileReadsTheSameAndItsHashIsChecked(t *testing.T) {
	f := newFixture(t)
	snap := f.db.snapshot(t)
	f.db.close() // a snapshot has no etcd running on it

	list := func() (string, string, error) {
		var out, log bytes.Buffer
		db, err := Open(context.Background(), Source{Snapshot: snap}, &log)
		if err != nil {
			return "", log.String(), err
		}
		defer db.Close()
		err = Run(context.Background(), db, Options{Output: OutputName, Out: &out, Log: &log})
		return out.String(), log.String(), err
	}
	out, log, err := list()
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if !strings.Contains(out, "configmaps/kube-system/cm1\n") || strings.Count(out, "\n") != 6 || !strings.Contains(log, "sha256 trailer matches") {
		t.Errorf("out:\n%s\nlog:\n%s", out, log)
	}

	b, _ := os.ReadFile(snap)
	b[len(b)-1] ^= 0xff
	os.WriteFile(snap, b, 0o600)
	if _, log, err := list(); err != nil || !strings.Contains(log, "WARNING") || !strings.Contains(log, "does not match") {
		t.Errorf("damaged trailer: %v\n%s", err, log)
	}
}

func TestParseKeyAndSelectorAgreeOnTheKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want Ref
		gr   schema.GroupResource
	}{
		{"/registry/secrets/kube-system/bootstrap-token-abcdef", Ref{Resource: "secrets", Namespace: "kube-system", Name: "bootstrap-token-abcdef"}, schema.GroupResource{Resource: "secrets"}},
		{"/registry/minions/node1", Ref{Resource: "nodes", Name: "node1"}, schema.GroupResource{Resource: "nodes"}},
		{"/registry/services/specs/default/kubernetes", Ref{Resource: "services", Namespace: "default", Name: "kubernetes"}, schema.GroupResource{Resource: "services"}},
		{"/registry/services/endpoints/default/kubernetes", Ref{Resource: "endpoints", Namespace: "default", Name: "kubernetes"}, schema.GroupResource{Resource: "endpoints"}},
		{"/registry/ingress/default/web", Ref{Resource: "ingresses", Namespace: "default", Name: "web"}, schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"}},
		{"/registry/deployments/kube-system/coredns", Ref{Resource: "deployments", Namespace: "kube-system", Name: "coredns"}, schema.GroupResource{Group: "apps", Resource: "deployments"}},
		{"/registry/events/default/x.1", Ref{Resource: "events", Namespace: "default", Name: "x.1"}, schema.GroupResource{Resource: "events"}},
		{"/registry/leases/kube-system/kube-scheduler", Ref{Resource: "leases", Namespace: "kube-system", Name: "kube-scheduler"}, schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}},
		{"/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", Ref{Resource: "apiextensions.k8s.io/customresourcedefinitions", Name: "widgets.example.com"},
			schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}},
		{"/registry/example.com/widgets/default/w1", Ref{Resource: "example.com/widgets", Namespace: "default", Name: "w1"}, schema.GroupResource{Group: "example.com", Resource: "widgets"}},
	} {
		got := ParseKey(DefaultPrefix, tc.key)
		tc.want.Key = tc.key
		if got != tc.want || got.GroupResource() != tc.gr {
			t.Errorf("%s: got %+v %v, want %+v %v", tc.key, got, got.GroupResource(), tc.want, tc.gr)
		}
		// What a listing prints selects exactly that key again.
		sel, err := ParseSelector(got.String())
		if err != nil || sel.Key("/registry") != tc.key {
			t.Errorf("%s: selector %q gives key %q, %v", tc.key, got.String(), sel.Key("/registry"), err)
		}
	}
	for _, bad := range []string{"a/b/c/d", "configmaps//x", "/secrets"} {
		if _, err := ParseSelector(bad); err == nil {
			t.Errorf("selector %q: no error", bad)
		}
	}
}
