package extract

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-agent/etcd-agent/internal/lab/realetcd"
)

// extract reads what each etcd minor itself wrote (issue 40: 3.5 clusters
// are common): a member's data dir once it stopped, and a snapshot taken
// as `etcdctl snapshot save` takes it (the stream with etcd's sha256
// trailer). The fixture's db is written with this module's 3.6 mvcc
// package; this proves the real 3.5 and 3.6 files read the same.
func TestExtractReadsTheFilesOfEveryEtcdVersion(t *testing.T) {
	realetcd.OnVersions(t, func(t *testing.T, v realetcd.Version, bin string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		dataDir := filepath.Join(t.TempDir(), "data")
		p := realetcd.Start(t, bin, dataDir, "m1")
		cli := p.Client()
		defer cli.Close()
		put := func(key string, value []byte) int64 {
			r, err := cli.Put(ctx, key, string(value))
			if err != nil {
				t.Fatal(err)
			}
			return r.Header.Revision
		}
		put("/registry/configmaps/kube-system/cm1", protobuf(t, configMap("kube-system", "cm1", map[string]string{"a": "1"})))
		put("/registry/configmaps/default/gone", protobuf(t, configMap("default", "gone", nil)))
		if _, err := cli.Delete(ctx, "/registry/configmaps/default/gone"); err != nil {
			t.Fatal(err)
		}
		cm1 := configMap("kube-system", "cm1", map[string]string{"a": "2"})
		cm1Rev := put("/registry/configmaps/kube-system/cm1", protobuf(t, cm1))
		if _, err := cli.Compact(ctx, cm1Rev, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		put("/registry/example.com/widgets/default/w1", []byte(widgetJSON))
		for i := range 40 { // past --snapshot-count 25: a real .snap in the data dir
			put("/registry/masterleases/10.0.0.1", []byte{byte(i)})
		}
		snap := filepath.Join(t.TempDir(), "snapshot.db")
		rc, err := cli.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(snap)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		p.Stop(t)

		for _, src := range []struct {
			name string
			src  Source
			log  string
		}{{"data dir", Source{DataDir: dataDir}, ""}, {"snapshot", Source{Snapshot: snap}, "sha256 trailer matches"}} {
			run := func(o Options) (string, string) {
				t.Helper()
				var out, log bytes.Buffer
				db, err := Open(ctx, src.src, &log)
				if err != nil {
					t.Fatalf("%s %s: open: %v\n%s", v.Row, src.name, err, log.String())
				}
				defer db.Close()
				o.Out, o.Log = &out, &log
				if err := Run(ctx, db, o); err != nil {
					t.Fatalf("%s %s: %v\n%s", v.Row, src.name, err, log.String())
				}
				return out.String(), log.String()
			}
			out, log := run(Options{Output: OutputName})
			if want := "configmaps/kube-system/cm1\nexample.com/widgets/default/w1\nmasterleases/10.0.0.1\n"; !sameLines(out, want) || !strings.Contains(log, src.log) {
				t.Errorf("%s %s: listed\n%s\nwant the lines of\n%s\nlog:\n%s", v.Row, src.name, out, want, log)
			}
			out, _ = run(Options{Selector: "configmaps/kube-system/cm1", Output: OutputYAML})
			var got corev1.ConfigMap
			if err := yaml.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			want := cm1.DeepCopy()
			setTypeAndRevision(t, want, cm1Rev)
			if !apiequality.Semantic.DeepEqual(&got, want) {
				t.Errorf("%s %s: cm1 is\n%s\nwant %+v", v.Row, src.name, out, want)
			}
		}
	})
}

// sameLines: a and b hold the same lines, in any order.
func sameLines(a, b string) bool {
	x, y := strings.Split(strings.TrimSpace(a), "\n"), strings.Split(strings.TrimSpace(b), "\n")
	if len(x) != len(y) {
		return false
	}
	seen := map[string]int{}
	for _, l := range x {
		seen[l]++
	}
	for _, l := range y {
		if seen[l]--; seen[l] < 0 {
			return false
		}
	}
	return true
}
