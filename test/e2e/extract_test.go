package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// extractRun runs etcd-agent extract; it returns stdout, stderr and the
// db revision extract reports.
func extractRun(t *testing.T, args ...string) (stdout, stderr []byte, rev int64, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, agentBinary, append([]string{"extract"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if m := regexp.MustCompile(`revision (\d+)`).FindSubmatch(errb.Bytes()); m != nil {
		rev, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	return out.Bytes(), errb.Bytes(), rev, err
}

// lastRevision of the lab's etcd now.
// onDisk waits until node n's db on disk holds revision rev: n has applied
// it (a serializable read there), and its backend committed after that
// (etcd writes its db in batches, every 100 ms): a live data dir read then
// must not be older.
func onDisk(t *testing.T, l *lab.Lab, n *lab.Node, rev int64) {
	t.Helper()
	cli, err := l.EtcdClientFor(n.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	eventually(t, 10*time.Second, fmt.Sprintf("%s applied revision %d", n.Name, rev), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := cli.Get(ctx, "/", clientv3.WithSerializable())
		if err == nil && r.Header.Revision < rev {
			err = fmt.Errorf("at revision %d", r.Header.Revision)
		}
		return err
	})
	commits := func() (uint64, error) {
		m, err := lab.Scrape(context.Background(), n.ClientURL+"/metrics")
		if err != nil {
			return 0, err
		}
		fam, ok := m["etcd_disk_backend_commit_duration_seconds"]
		if !ok || len(fam.Metric) == 0 {
			return 0, fmt.Errorf("no etcd_disk_backend_commit_duration_seconds")
		}
		return fam.Metric[0].GetHistogram().GetSampleCount(), nil
	}
	after, err := commits()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, n.Name+"'s backend committed once more", func() error {
		c, err := commits()
		if err == nil && c <= after {
			err = fmt.Errorf("%d commits, waiting for more than %d", c, after)
		}
		return err
	})
}

func lastRevision(t *testing.T, l *lab.Lab) int64 {
	t.Helper()
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// sameAsTheAPIAt compares extract's List of a resource (JSON) with what
// the API serves at exactly that revision (resourceVersionMatch=Exact):
// every object deep-equal, none more, none less.
func sameAsTheAPIAt[T any](t *testing.T, what string, extracted []byte, rev int64, list func(metav1.ListOptions) ([]T, error), key func(*T) string, clear func(*T)) int {
	t.Helper()
	var got struct {
		Kind  string `json:"kind"`
		Items []T    `json:"items"`
	}
	if err := json.Unmarshal(extracted, &got); err != nil || got.Kind != "List" {
		t.Fatalf("%s: extract's output is not a List (%v): %.300s", what, err, extracted)
	}
	want, err := list(metav1.ListOptions{ResourceVersion: strconv.FormatInt(rev, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatalf("%s: the API's list at revision %d: %v", what, rev, err)
	}
	byKey := map[string]*T{}
	for i := range got.Items {
		clear(&got.Items[i])
		byKey[key(&got.Items[i])] = &got.Items[i]
	}
	if len(got.Items) != len(want) || len(want) == 0 {
		t.Fatalf("%s at revision %d: extract gave %d, the API %d", what, rev, len(got.Items), len(want))
	}
	for i := range want {
		w := &want[i]
		clear(w)
		g, ok := byKey[key(w)]
		if !ok {
			t.Fatalf("%s: %s is served by the API at revision %d, not extracted", what, key(w), rev)
		}
		// As JSON: managedFields' raw FieldsV1 bytes keep the whitespace
		// and key order of how they were decoded, which JSON compacts.
		gj, _ := json.Marshal(g)
		wj, _ := json.Marshal(w)
		if !bytes.Equal(gj, wj) {
			t.Fatalf("%s %s differs:\nextract %s\napi     %s", what, key(w), gj, wj)
		}
	}
	return len(want)
}

func clearTypeMeta[T any](get func(*T) *metav1.TypeMeta) func(*T) {
	return func(o *T) { *get(o) = metav1.TypeMeta{} }
}

// TestExtractReturnsWhatTheAPIServes: etcd-agent extract on a snapshot of
// the lab gives the ConfigMaps, Secrets and Nodes the API serves at the
// snapshot's revision, object for object; on a running member's data dir it
// reads while etcd serves writes undisturbed (none fails, the member never
// restarts); on a corrupt db it says so, exit 1, without a crash.
func TestExtractReturnsWhatTheAPIServes(t *testing.T) {
	l := shared(t)
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seedObjects(t, ctx, kc)
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	snap := filepath.Join(t.TempDir(), "etcd.db")
	takeSnapshot(t, cli, snap)
	n := 0
	for _, r := range []string{"configmaps", "secrets", "nodes"} {
		out, stderr, rev, err := extractRun(t, "--snapshot", snap, r, "-o", "json")
		if err != nil || rev == 0 {
			t.Fatalf("extract %s: %v (revision %d)\n%s", r, err, rev, stderr)
		}
		switch r {
		case "configmaps":
			n += sameAsTheAPIAt(t, r, out, rev, func(o metav1.ListOptions) ([]corev1.ConfigMap, error) {
				l, err := kc.CoreV1().ConfigMaps("").List(ctx, o)
				if err != nil {
					return nil, err
				}
				return l.Items, nil
			}, func(c *corev1.ConfigMap) string { return c.Namespace + "/" + c.Name }, clearTypeMeta(func(c *corev1.ConfigMap) *metav1.TypeMeta { return &c.TypeMeta }))
		case "secrets":
			n += sameAsTheAPIAt(t, r, out, rev, func(o metav1.ListOptions) ([]corev1.Secret, error) {
				l, err := kc.CoreV1().Secrets("").List(ctx, o)
				if err != nil {
					return nil, err
				}
				return l.Items, nil
			}, func(s *corev1.Secret) string { return s.Namespace + "/" + s.Name }, clearTypeMeta(func(s *corev1.Secret) *metav1.TypeMeta { return &s.TypeMeta }))
		case "nodes":
			n += sameAsTheAPIAt(t, r, out, rev, func(o metav1.ListOptions) ([]corev1.Node, error) {
				l, err := kc.CoreV1().Nodes().List(ctx, o)
				if err != nil {
					return nil, err
				}
				return l.Items, nil
			}, func(n *corev1.Node) string { return n.Name }, clearTypeMeta(func(n *corev1.Node) *metav1.TypeMeta { return &n.TypeMeta }))
		}
	}
	t.Logf("snapshot: %d ConfigMaps, Secrets and Nodes equal to the API's at the snapshot's revision", n)

	t.Run("live data dir", func(t *testing.T) {
		n1 := nodeOf(t, l, "node1")
		pid, err := l.EtcdPID("node1")
		if err != nil {
			t.Fatal(err)
		}
		// Writes through node1 alone while extract reads its db.
		w, err := l.EtcdClientFor(n1.ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		var ok, failed atomic.Int64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				wctx, c := context.WithTimeout(context.Background(), 2*time.Second)
				if _, err := w.Put(wctx, fmt.Sprintf("/extract-live/%d", i%50), "x"); err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
				c()
			}
		}()
		before := lastRevision(t, l)
		onDisk(t, l, n1, before)
		out, stderr, rev, err := extractRun(t, "--data-dir", n1.DataDir, "configmaps/kube-system/kubeadm-config", "-o", "yaml")
		close(stop)
		<-done
		if err != nil {
			t.Fatalf("extract on a live data dir: %v\n%s", err, stderr)
		}
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal(out, &cm); err != nil || cm.Data["ClusterConfiguration"] != "etcd: {local: {}}\n" {
			t.Fatalf("kubeadm-config from the live data dir: %+v (%v)", cm.Data, err)
		}
		if rev < before {
			t.Fatalf("the live data dir read at revision %d, older than %d before the read", rev, before)
		}
		if failed.Load() != 0 || ok.Load() == 0 {
			t.Fatalf("writes through node1 during the extract: %d ok, %d failed: want none failed", ok.Load(), failed.Load())
		}
		if now, err := l.EtcdPID("node1"); err != nil || now != pid {
			t.Fatalf("node1's etcd pid %d (%v), was %d: restarted", now, err, pid)
		}
		t.Logf("live data dir read at revision %d while %d writes went through node1, none failed", rev, ok.Load())
	})

	t.Run("corrupt db", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "corrupt.db")
		b, err := os.ReadFile(snap)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 3; i < len(b)/3+8192 && i < len(b); i++ {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(bad, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, _, err := extractRun(t, "--snapshot", bad, "configmaps")
		if code := exitCode(err); code != 1 || !strings.Contains(string(stderr), "not a readable etcd db") || strings.Contains(string(stderr), "goroutine ") {
			t.Fatalf("extract of a corrupt db: exit %d (%v), stderr:\n%s\nwant exit 1 saying it is not a readable etcd db, no crash", code, err, stderr)
		}
	})
}

// seedObjects puts the objects an SRE would want back: kubeadm's
// ClusterConfiguration and a Secret.
func seedObjects(t *testing.T, ctx context.Context, kc kubernetes.Interface) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kubeadm-config", Namespace: "kube-system"},
		Data: map[string]string{"ClusterConfiguration": "etcd: {local: {}}\n"}}
	if _, err := kc.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-abcdef", Namespace: "kube-system"},
		Type: "bootstrap.kubernetes.io/token", Data: map[string][]byte{"token-id": []byte("abcdef"), "token-secret": []byte("0123456789abcdef")}}
	if _, err := kc.CoreV1().Secrets("kube-system").Create(ctx, s, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestWhenEveryAPIServerIsGoneRunsAsWritten: recovery.md's "When every API
// server is gone" block, run as written on node1 of the lab (its member
// running: the block reads through a copy), and what it wrote compared
// with what the API serves.
func TestWhenEveryAPIServerIsGoneRunsAsWritten(t *testing.T) {
	l := shared(t)
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seedObjects(t, ctx, kc)
	p := loadProcedure(t, "api-gone")
	p.onNode(t, l, "node1", l.Spec.ClientURLs())
	p.run(t, 3*time.Minute)
	dir := filepath.Join(p.root, "from-etcd")
	b, err := os.ReadFile(filepath.Join(dir, "kubeadm-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	api, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.UID != api.UID || !apiequality.Semantic.DeepEqual(cm.Data, api.Data) {
		t.Fatalf("kubeadm-config.yaml: uid %s data %v; the API: uid %s data %v", cm.UID, cm.Data, api.UID, api.Data)
	}
	var secrets corev1.SecretList
	b, err = os.ReadFile(filepath.Join(dir, "secrets.yaml"))
	if err == nil {
		err = yaml.Unmarshal(b, &secrets)
	}
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range secrets.Items {
		found = found || s.Namespace == "kube-system" && s.Name == "bootstrap-token-abcdef" && string(s.Data["token-secret"]) == "0123456789abcdef"
	}
	if !found {
		t.Fatalf("secrets.yaml (%d secrets) lacks kube-system/bootstrap-token-abcdef with its data", len(secrets.Items))
	}
}
