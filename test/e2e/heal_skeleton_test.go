package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// skeletonHold is how long the wiped member must outlive etcd's purge while
// its heal is held off: three of its 30 s ticks.
const skeletonHold = 95 * time.Second

// TestAWipedMemberThatServesOutlivesEtcdsPurgeUntilItIsHealed (issue 38): a
// double fault. node3's node is gone (its agent frozen, its etcd stopped)
// and node2's data dir is wiped (its contents: on a kubeadm node the data
// dir is the root of etcd's hostPath volume) while its etcd serves. Healing
// node2 would lose the quorum (would-lose-quorum: node1 and node2 are the
// two voters that serve), so it is held off. Before, node2's etcd ended
// itself at its purge's next tick ("failed to purge wal file ... no such
// file or directory"), at most 30 s after the wipe, and the cluster lost
// its majority. Now its agent puts the empty skeleton back, marked, within
// a second: node2's etcd (the same process) serves for 95 s, quorum never
// lost, no failed write. Once node3 is back the agent heals node2 (the
// marked skeleton quarantined with it), HashKV equal.
func TestAWipedMemberThatServesOutlivesEtcdsPurgeUntilItIsHealed(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true})
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2", "node3")
	h := startHeal(t, l)

	// node3's node is gone: its agent first (a frozen agent does not put
	// its vanished manifest back), then its member.
	resumeNode3 := holdAgent(t, l, "node3")
	if err := l.StopMember("node3"); err != nil {
		t.Fatal(err)
	}
	pid, err := l.EtcdPID("node2")
	if err != nil {
		t.Fatal(err)
	}
	node2 := nodeOf(t, l, "node2")
	marker := localdisk.SkeletonMarker(node2.DataDir)
	h.fault()
	if err := l.WipeDataDirContents("node2"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "node2's agent puts the wiped data dir's skeleton back, marked", func() error {
		if _, err := os.Stat(marker); err != nil {
			return err
		}
		for _, d := range []string{"member/snap", "member/wal"} {
			if fi, err := os.Stat(filepath.Join(node2.DataDir, d)); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s: %v", d, err)
			}
		}
		return nil
	})
	fi, _ := os.Stat(marker)
	t.Logf("skeleton marked %s after the wipe", fi.ModTime().Sub(h.faultAt).Round(time.Millisecond))

	// Held: node2 cannot be stopped while node3 is away. It outlives three
	// purge ticks as the same process, serving; the cluster keeps its
	// quorum (the checker's prober says so at finish).
	eventually(t, 30*time.Second, "node2's agent refuses would-lose-quorum", func() error {
		_, err := refusedFor(l, "node2", "would-lose-quorum")
		return err
	})
	for time.Since(h.faultAt) < skeletonHold {
		if now, err := l.EtcdPID("node2"); err != nil || now != pid {
			t.Fatalf("node2's etcd is not the process that was wiped under (pid %d, was %d: %v) %s after the wipe",
				now, pid, err, time.Since(h.faultAt).Round(time.Second))
		}
		if fatals := logEntries(t, etcdLog(t, l, "node2"), "failed to purge "); len(fatals) > 0 {
			t.Fatalf("node2's etcd ended on its purge %s after the wipe: %v", time.Since(h.faultAt).Round(time.Second), fatals)
		}
		if s, dd, err := agentState(l, "node2"); err != nil || dd != "corrupt" {
			t.Fatalf("node2's agent says %s, data dir %s (%v); want the marked skeleton classed corrupt", s, dd, err)
		}
		if v, err := metricSum(l, "node2", "etcd_agent_data_dir_skeleton_restores_total"); err != nil || v != 1 {
			t.Fatalf("data_dir_skeleton_restores_total %v (%v), want 1", v, err)
		}
		assertNoRecovery(t, l, "node2", "node2")
		time.Sleep(2 * time.Second)
	}
	refused, _ := refusedFor(l, "node2", "would-lose-quorum")
	snaps, _ := filepath.Glob(filepath.Join(node2.DataDir, "member", "snap", "*"))
	t.Logf("node2's etcd (pid %d) still serves %s after the wipe, refused would-lose-quorum for %s; the skeleton's member/snap holds %d files",
		pid, time.Since(h.faultAt).Round(time.Second), refused.Round(time.Second), len(snaps))
	evs, err := h.kc.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=node2,reason=" + nodereport.ReasonDataDirSkeletonRestored})
	if err != nil || len(evs.Items) != 1 || !strings.Contains(evs.Items[0].Message, "purge") {
		t.Fatalf("DataDirSkeletonRestored Events on node2: %v (%v), want one naming etcd's purge", evs, err)
	}

	// node3 is back under its own ID: node2 is healed, its marked
	// skeleton quarantined, never started on.
	if err := l.StartMember("node3"); err != nil {
		t.Fatal(err)
	}
	resumeNode3()
	j := h.waitHealed("node2", "node2", 3, 3*time.Minute)
	after := idsByPeer(mustMembers(t, l))
	if p2 := peerOf(t, l, "node2"); after[p2] == before[p2] || uint64(j.OldMemberID) != before[p2] {
		t.Fatalf("node2: before %x, after %x, journal old %x: want a new member ID", before[p2], after[p2], uint64(j.OldMemberID))
	}
	for _, n := range []string{"node1", "node3"} {
		if p := peerOf(t, l, n); after[p] != before[p] {
			t.Fatalf("%s's member changed ID %x → %x", n, before[p], after[p])
		}
	}
	assertQuarantine(t, l, "node2", j, filepath.Join("member", localdisk.SkeletonMarkerName))
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the rejoined member's data dir carries the skeleton marker")
	}
	if starts := etcdStarts(t, l, "node2", h.faultAt, time.Now()); len(starts) != 1 {
		t.Fatalf("node2's etcd started %d times since the wipe, want once (the learner's start): the skeleton was never started on", len(starts))
	}
	rep := h.finish(invariant.Options{})
	t.Logf("node2: wiped, kept alive %s by its skeleton, healed %s after the wipe; api writes failed %d of %d, longest read outage %s",
		skeletonHold, j.FinishedAt.Sub(h.faultAt).Round(time.Millisecond), rep.Writes.APIFailed, rep.Writes.APIAttempted, rep.QuorumLostFor.Round(time.Millisecond))
}

// etcdLog is node's etcd container log.
func etcdLog(t *testing.T, l *lab.Lab, node string) string {
	return filepath.Join(nodeOf(t, l, node).LogsDir, "etcd-"+node+"_etcd.log")
}
