package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
)

// restoreDelay is the labs' --manifest-restore-delay: long enough that a
// restore is told from a fast put-back, short for the suite.
const restoreDelay = 10 * time.Second

// TestAVanishedEtcdManifestIsPutBack (seeds/003: "simply deleting the etcd
// pod ... causes a cluster outage ... this WILL happen to users"): in a
// three-member lab node2's etcd manifest is deleted by hand. After the
// delay its agent puts back its checkpoint of the member's last good
// manifest: the same member ID on the same data, no recovery, no write
// lost. Then what must never come back: node3's manifest deleted after its
// Node was annotated etcd-agent.io/decommission (it comes back only when
// the annotation goes), and node2's deleted and its member removed.
func TestAVanishedEtcdManifestIsPutBack(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--manifest-restore-delay=" + restoreDelay.String()}})
	for _, n := range []string{"node2", "node3"} {
		waitCheckpoint(t, l, n)
	}
	before := idsByPeer(mustMembers(t, l))
	// A person deleting the leader's manifest costs the writes of an
	// election; that is etcd's, not what this scenario measures (CI run with
	// parallel scenarios: node2 led, one write timed out).
	ensureNotLeader(t, l, "node2")
	h := startHeal(t, l)
	h.fault()
	removed := removeManifest(t, l, "node2")
	back := waitManifestBack(t, l, "node2", removed)
	if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("node2's manifest deleted, put back after %s (delay %s), the member serving again %s after the deletion",
		back.Sub(removed).Round(time.Millisecond), restoreDelay, time.Since(removed).Round(time.Millisecond))
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
		t.Fatalf("membership changed: before %v, now %v", before, now)
	}
	assertNoRecovery(t, l, "node2", "node2")
	if v, err := metricSum(l, "node2", "etcd_agent_manifest_restores_total"); err != nil || v != 1 {
		t.Fatalf("node2: manifest_restores_total %v (%v), want 1", v, err)
	}
	wantRestoredEvent(t, h, "node2")
	h.finish(invariantDefaults())

	t.Run("decommissioned", func(t *testing.T) {
		annotate(t, h.kc, "node3", map[string]any{nodereport.AnnotationDecommission: "true"})
		eventually(t, 30*time.Second, "node3's agent keeps the decommission in its state dir", func() error {
			_, err := os.Stat(filepath.Join(nodeOf(t, l, "node3").StateDir, "decommissioned"))
			return err
		})
		removed := removeManifest(t, l, "node3")
		assertStaysGone(t, l, "node3", removed, 0)
		annotate(t, h.kc, "node3", map[string]any{nodereport.AnnotationDecommission: nil})
		waitManifestBack(t, l, "node3", removed)
		if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
			t.Fatalf("membership changed: before %v, now %v", before, now)
		}
	})

	t.Run("removed", func(t *testing.T) {
		id := before[peerOf(t, l, "node2")]
		removed := removeManifest(t, l, "node2")
		// etcd refuses a removal until the members left have been active
		// for a while ("unhealthy cluster": node3 just came back): retried,
		// as a person would.
		eventually(t, 60*time.Second, fmt.Sprintf("member remove %x", id), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := h.cli.MemberRemove(ctx, id)
			return err
		})
		assertStaysGone(t, l, "node2", removed, 1)
		assertNoRecovery(t, l, "node2", "node2")
	})
}

// TestALoneMembersVanishedManifestIsPutBack: in a one-member control plane
// the manifest's deletion takes etcd and with it the API down (the outage
// of seeds/003). The agent, with no API and no member list, knows from its
// checkpoint that the member was its cluster's only voter (etcd cannot
// remove the last member): it puts the manifest back after the delay, and
// the member serves its data under its old ID; the API comes back.
func TestALoneMembersVanishedManifestIsPutBack(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 1, Agents: true, AgentArgs: []string{"--manifest-restore-delay=" + restoreDelay.String()}})
	waitCheckpoint(t, l, "node1")
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "/lone/before", "kept")
	if err != nil {
		t.Fatal(err)
	}
	before := idsByPeer(mustMembers(t, l))
	removed := removeManifest(t, l, "node1")
	eventually(t, 60*time.Second, "node1's etcd, the API's only one, stops", func() error {
		if pid, err := l.EtcdPID("node1"); err == nil {
			return fmt.Errorf("etcd runs (pid %d)", pid)
		}
		return nil
	})
	back := waitManifestBack(t, l, "node1", removed)
	if err := l.WaitHealthy(context.Background(), 1, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
		t.Fatalf("the member changed: before %v, now %v", before, now)
	}
	got, err := cli.Get(ctx, "/lone/before")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "kept" || got.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("the key written before: %+v (%v), want kept at revision %d", got, err, put.Header.Revision)
	}
	eventually(t, 60*time.Second, "the API serves again", func() error {
		_, err := kc.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		return err
	})
	t.Logf("node1's manifest deleted (the API down), put back after %s, the API serving again %s after the deletion",
		back.Sub(removed).Round(time.Millisecond), time.Since(removed).Round(time.Millisecond))
	assertNoRecovery(t, l, "node1", "node1")
}

// waitCheckpoint waits until node's agent has kept a checkpoint of its
// member's manifest (taken when it first sees the member healthy).
func waitCheckpoint(t *testing.T, l *lab.Lab, node string) {
	t.Helper()
	eventually(t, 60*time.Second, node+"'s agent keeps a checkpoint of the etcd manifest", func() error {
		_, err := os.Stat(filepath.Join(nodeOf(t, l, node).StateDir, "manifest-checkpoint", "checkpoint.json"))
		return err
	})
}

// removeManifest deletes node's etcd manifest, as a person's mistake would.
func removeManifest(t *testing.T, l *lab.Lab, node string) time.Time {
	t.Helper()
	if err := os.Remove(nodeOf(t, l, node).EtcdManifest()); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// waitManifestBack waits until node's manifest is back and checks it came
// back no sooner than the delay.
func waitManifestBack(t *testing.T, l *lab.Lab, node string, removed time.Time) time.Time {
	t.Helper()
	eventually(t, restoreDelay+90*time.Second, node+"'s etcd manifest is put back", func() error {
		_, err := os.Stat(nodeOf(t, l, node).EtcdManifest())
		return err
	})
	back := time.Now()
	if back.Sub(removed) < restoreDelay {
		t.Fatalf("%s's manifest back %s after its deletion, before the delay %s", node, back.Sub(removed), restoreDelay)
	}
	return back
}

// assertStaysGone: node's agent judges the missing manifest several times
// after the delay (its observations counted past removed+delay), says it
// is missing, and does not put it back.
func assertStaysGone(t *testing.T, l *lab.Lab, node string, removed time.Time, restoresBefore float64) {
	t.Helper()
	due := removed.Add(restoreDelay)
	var at float64 = -1
	eventually(t, restoreDelay+60*time.Second, node+"'s agent observes past the delay", func() error {
		n, err := observations(l, node)
		if err != nil {
			return err
		}
		switch {
		case time.Now().Before(due):
			return fmt.Errorf("the delay has not passed")
		case at < 0:
			at = float64(n)
			return fmt.Errorf("the delay passed at %d observations", n)
		case float64(n) < at+3:
			return fmt.Errorf("%d observations since the delay passed", uint64(float64(n)-at))
		}
		return nil
	})
	if _, err := os.Stat(nodeOf(t, l, node).EtcdManifest()); err == nil {
		t.Fatalf("%s's manifest was put back", node)
	}
	if v, err := metricSum(l, node, "etcd_agent_manifest_missing"); err != nil || v != 1 {
		t.Fatalf("%s: manifest_missing %v (%v), want 1", node, v, err)
	}
	if v, err := metricSum(l, node, "etcd_agent_manifest_restores_total"); err != nil || v != restoresBefore {
		t.Fatalf("%s: manifest_restores_total %v (%v), want %v as before", node, v, err, restoresBefore)
	}
}

// wantRestoredEvent: node's agent said so with a ManifestRestored Event.
func wantRestoredEvent(t *testing.T, h *healRun, node string) {
	t.Helper()
	eventually(t, 30*time.Second, "a ManifestRestored event for "+node, func() error {
		evs, err := h.kc.CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + nodereport.ReasonManifestRestored})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == node {
				return nil
			}
		}
		return fmt.Errorf("%d ManifestRestored events, none about Node %s", len(evs.Items), node)
	})
}
