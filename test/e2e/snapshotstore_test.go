package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
)

// TestHealUploadsItsPreChangeBackupToTheSnapshotStore (issue 15): with
// --snapshot-store, a heal's verified pre-change backup also goes to the
// store, in the background (the heal does not wait on it): a shared
// filesystem (file://) and a real S3-compatible server (s3://, SeaweedFS).
// The object carries the sha256 the heal verified, reads back verified and
// equal to the quarantined copy, and the agent counts it uploaded.
func TestHealUploadsItsPreChangeBackupToTheSnapshotStore(t *testing.T) {
	for _, kind := range []string{lab.SnapshotStoreFile, lab.SnapshotStoreS3} {
		t.Run(kind, func(t *testing.T) {
			// Serial: it sets the S3 credentials in this process's environment.
			l := newSerialLab(t, lab.Options{Nodes: 3, Agents: true, SnapshotStore: kind})
			ctx := context.Background()
			cli, err := l.EtcdClient()
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ml, err := cli.MemberList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			clusterID := ml.Header.ClusterId
			h := wipeNode2(t, l)
			j := h.waitHealed("node2", "node2", 3, 90*time.Second)
			if j.SnapshotSHA256 == "" || j.SnapshotPath == "" {
				t.Fatalf("journal has no pre-change backup: %+v", j)
			}
			for k, v := range l.Spec.SnapshotStore.Env() {
				t.Setenv(k, v)
			}
			s, err := snapshotstore.Open(ctx, l.Spec.SnapshotStore.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var obj snapshotstore.Object
			eventually(t, 60*time.Second, "the pre-change backup is in the store", func() error {
				objs, bad, err := s.List(ctx, clusterID)
				if err != nil {
					return err
				}
				for _, o := range objs {
					if o.Meta.SHA256 == j.SnapshotSHA256 {
						obj = o
						return nil
					}
				}
				return fmt.Errorf("objects %+v, bad %v", objs, bad)
			})
			if obj.Meta.Member != "node2" || obj.Meta.MemberID != uint64(j.OldMemberID) || obj.Meta.Size != j.SnapshotBytes || obj.Meta.Source != j.SnapshotSource {
				t.Fatalf("object %+v does not describe the backup of journal %s (old member %x, %d bytes from %s)", obj, j.ID, uint64(j.OldMemberID), j.SnapshotBytes, j.SnapshotSource)
			}
			dst := filepath.Join(t.TempDir(), "from-store.db")
			if _, err := s.Get(ctx, obj.Key, dst); err != nil {
				t.Fatal(err)
			}
			a, err := os.ReadFile(j.SnapshotPath)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(dst); !bytes.Equal(a, b) {
				t.Fatal("the stored backup differs from the quarantined one")
			}
			if v, err := metricValue(l, "node2", "etcd_agent_snapshot_store_uploads_total", map[string]string{"result": "uploaded"}); err != nil || v != 1 {
				t.Fatalf("uploads counted %v (%v), want 1", v, err)
			}
			t.Logf("%s store: %s holds %s (%d bytes, sha256 %s…)", kind, l.Spec.SnapshotStore.URL, obj.Key, obj.Meta.Size, obj.Meta.SHA256[:12])
			h.finish(invariant.Options{})
		})
	}
}
