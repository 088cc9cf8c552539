package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestQuarantinePrunedOnceHealthySince: --quarantine-keep is enforced in
// the lab. node2 is healed twice (its data dir wiped under load); with
// --quarantine-keep=1 the first heal's pre-change snapshot is deleted once
// the member has been healthy since it was made (here for 3 s), the second
// heal's is kept, and the deletion is a QuarantinePruned Event and counted.
func TestQuarantinePrunedOnceHealthySince(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true,
		AgentArgs: []string{"--rejoin-mode=raft", "--quarantine-keep=1", "--quarantine-prune-after=3s"}})
	h := wipeNode2(t, l)
	first := h.waitHealed("node2", "node2", 3, 90*time.Second)
	h.finish(invariant.Options{})
	// One copy only: nothing beyond the newest 1 to prune.
	if _, err := os.Stat(first.SnapshotPath); err != nil {
		t.Fatalf("the only pre-change snapshot %s: %v", first.SnapshotPath, err)
	}

	h = wipeNode2(t, l)
	var second = first
	eventually(t, 90*time.Second, "node2 healed a second time", func() error {
		j, ok := loadJournal(t, l, "node2", "node2")
		if !ok || j.ID == first.ID || j.Active() || j.Result != "succeeded" {
			return fmt.Errorf("journal %s active %v result %q", j.ID, j.Active(), j.Result)
		}
		second = j
		return nil
	})
	eventually(t, 30*time.Second, "the first heal's snapshot pruned", func() error {
		if _, err := os.Stat(first.SnapshotPath); !os.IsNotExist(err) {
			return fmt.Errorf("%s still there (%v)", first.SnapshotPath, err)
		}
		return nil
	})
	assertQuarantine(t, l, "node2", second)
	// Counted right after the file goes (a read at once races the count).
	eventually(t, 10*time.Second, "the prune counted", func() error {
		if v, err := metricValue(l, "node2", "etcd_agent_quarantine_pruned_total", nil); err != nil || v != 1 {
			return fmt.Errorf("etcd_agent_quarantine_pruned_total = %v (%v), want 1", v, err)
		}
		return nil
	})
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a QuarantinePruned Event naming the snapshot", func() error {
		evs, err := kc.CoreV1().Events("default").List(context.Background(),
			metav1.ListOptions{FieldSelector: "involvedObject.name=node2,reason=" + nodereport.ReasonQuarantinePruned})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, first.SnapshotPath) {
				return nil
			}
		}
		return fmt.Errorf("%d QuarantinePruned events, none naming %s", len(evs.Items), first.SnapshotPath)
	})
	h.finish(invariant.Options{})
}
