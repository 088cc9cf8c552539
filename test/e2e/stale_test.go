package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/pin"
)

// TestRestoredDataDirNeverStartsUnderItsOldID (issue 15, UC2): node2's data
// dir is copied aside with the member stopped, 2,000 keys are written, then
// the old copy is put back (a PVC restored from a volume snapshot) and the
// member started. The copy has forgotten entries it acknowledged (and maybe
// votes): under its old member ID it would break raft's guarantees
// silently. The gate holds it (stale: behind the member's high-water mark),
// the agent rejoins it under a new ID at once (the grace period is an hour,
// so only the at-once rule explains the heal), the restored copy is kept in
// the quarantine, and no acknowledged write is lost.
func TestRestoredDataDirNeverStartsUnderItsOldID(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--grace-period=1h"}})
	ctx := context.Background()
	ensureNotLeader(t, l, "node2")
	n2 := nodeOf(t, l, "node2")
	old := idsByPeer(mustMembers(t, l))[peerOf(t, l, "node2")]

	if err := l.StopMember("node2"); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "etcd-copy")
	if err := l.CopyDataDir("node2", backup); err != nil {
		t.Fatal(err)
	}
	if err := l.StartMember("node2"); err != nil {
		t.Fatal(err)
	}
	waitAgentState(t, l, "node2", "healthy", "", 60*time.Second)

	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const keys = 2000
	for i := range keys {
		if _, err := cli.Put(ctx, fmt.Sprintf("/uc2-restored/%04d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	st, err := cli.Status(ctx, n2.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	reached := st.RaftIndex
	// The agent must have seen node2 keep that progress before the copy
	// goes back: that is what the restored copy is compared with.
	eventually(t, 30*time.Second, fmt.Sprintf("node2's pin records a high-water mark at index >= %d", reached), func() error {
		p, ok, err := pin.Load(n2.StateDir, n2.Member)
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("no pin")
		case p.HighWater.Index < reached:
			return fmt.Errorf("high-water mark %+v", p.HighWater)
		}
		return nil
	})

	w := watchMemberID(t, l, "node2")
	h := startHeal(t, l)
	if err := l.StopMember("node2"); err != nil {
		t.Fatal(err)
	}
	h.fault()
	if err := l.RestoreDataDir("node2", backup, filepath.Join(t.TempDir(), "etcd-replaced")); err != nil {
		t.Fatal(err)
	}
	restoredAt := time.Now() // from here on node2 may not serve under its old ID
	if err := l.StartMember("node2"); err != nil {
		t.Fatal(err)
	}
	t.Logf("node2: data dir restored to a copy from before %d keys were written (member index %d), started", keys, reached)
	// Until the agent is at it, the old ID must not answer (the final check
	// below covers every start up to the prepared data dir).
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, a := range w.since(restoredAt) {
			if a.id == old {
				t.Fatalf("node2 served under its old ID %x on the restored data dir, %s after the restore", old, a.at.Sub(restoredAt).Round(time.Millisecond))
			}
		}
		if j, ok := loadJournal(t, l, "node2", n2.Member); ok && j.StartedAt.After(restoredAt) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	j := h.waitHealed("node2", n2.Member, 3, 120*time.Second)
	if uint64(j.OldMemberID) != old || j.NewMemberID == 0 || uint64(j.NewMemberID) == old {
		t.Fatalf("journal: old %x new %x, want old %x and a new ID", uint64(j.OldMemberID), uint64(j.NewMemberID), old)
	}
	w.close()
	assertNotStarted(t, l, w, "node2", old, restoredAt, preparedAt(t, j))
	if len(logMessages(t, agentLog(t, l, "node2"), "data-dir-stale")) == 0 {
		t.Errorf("node2's agent never said data-dir-stale")
	}
	// The restored copy is kept, not deleted.
	assertQuarantine(t, l, "node2", j, "member/snap/db", "member/wal/*.wal")
	resp, err := cli.Get(ctx, "/uc2-restored/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != keys {
		t.Fatalf("%d of the %d keys written before the restore are there", resp.Count, keys)
	}
	h.finish(invariant.Options{})
}

// TestManagementRestoredPVNeverStartsUnderItsOldID (issue 15, UC2 on a
// StatefulSet pod): the PV of clusters-a/etcd-1 is copied as a snapshot of
// the live volume would be (etcd frozen for the copy), 2,000 keys are
// written, then the copy is put back and etcd killed (a PVC restored from a
// volume snapshot; the lab kubelet restarts the container). The restored
// data never serves under the member's old ID: the gate holds it (stale),
// the node's agent rejoins the member under a new ID, and no acknowledged
// write is lost.
func TestManagementRestoredPVNeverStartsUnderItsOldID(t *testing.T) {
	l := newLab(t, lab.Options{Management: true, Nodes: 3, HostedClusters: 1, Agents: true})
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns, pod := l.Spec.Management.HostedClusters[0], "etcd-1"
	node := checkHostedPlacement(t, l, kc, ns)[pod]
	oldHex := hostedMemberID(t, l, ns, pod)
	old, err := strconv.ParseUint(oldHex, 16, 64)
	if err != nil {
		t.Fatalf("member ID %q: %v", oldHex, err)
	}
	ep := fmt.Sprintf("http://%s:2379", l.HostedPodIP(ns, pod))
	stateDir := lab.HostedMemberStateDir(*mustNode(t, l, node), ns, pod)

	ensureHostedNotLeader(t, l, ns, ep)
	backup := filepath.Join(t.TempDir(), "pv-copy")
	if err := l.CopyPodData(ctx, ns, pod, backup); err != nil {
		t.Fatal(err)
	}
	cli, err := l.HostedEtcdClient(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const keys = 2000
	for i := range keys {
		if _, err := cli.Put(ctx, fmt.Sprintf("/uc2-restored/%04d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	st, err := cli.Status(ctx, ep)
	if err != nil {
		t.Fatal(err)
	}
	reached := st.RaftIndex
	eventually(t, 90*time.Second, fmt.Sprintf("%s/%s's pin records a high-water mark at index >= %d", ns, pod, reached), func() error {
		p, ok, err := pin.Load(stateDir, pod)
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("no pin")
		case p.HighWater.Index < reached:
			return fmt.Errorf("high-water mark %+v", p.HighWater)
		}
		return nil
	})

	ensureHostedNotLeader(t, l, ns, ep)
	w := watchMemberIDAt(t, l, ep)
	chk := startHostedCheckers(t, l, []string{ns})[ns]
	// etcd is killed on the restored data: a write in flight to it then
	// fails, as at any SIGKILL.
	aside := filepath.Join(t.TempDir(), "pv-replaced")
	if err := chk.HardFault(func() error { return l.RestorePodData(ctx, ns, pod, backup, aside) }); err != nil {
		t.Fatal(err)
	}
	restoredAt := time.Now()
	t.Logf("%s/%s on %s: PV data restored to a copy from before %d keys were written (member index %d), etcd killed", ns, pod, node, keys, reached)
	var j journal.Record
	eventually(t, 3*time.Minute, ns+"/"+pod+" rejoined under a new ID by the agent on "+node, func() error {
		for _, a := range w.since(restoredAt) {
			if a.id == old {
				return fmt.Errorf("STOP: served under its old ID %x on the restored data, %s after the restore", old, a.at.Sub(restoredAt).Round(time.Millisecond))
			}
		}
		var ok bool
		if j, ok, err = journal.Load(stateDir, pod); err != nil || !ok || !j.StartedAt.After(restoredAt) || j.Result != journal.ResultSucceeded {
			return fmt.Errorf("journal: ok=%v err=%v phase %s result %q", ok, err, j.Phase, j.Result)
		}
		return hostedVotersHealthy(ctx, l, ns)
	})
	w.close()
	for _, a := range w.since(restoredAt) {
		if a.id == old {
			t.Fatalf("served under its old ID %x on the restored data, %s after the restore", old, a.at.Sub(restoredAt).Round(time.Millisecond))
		}
	}
	logPhases(t, j)
	if uint64(j.OldMemberID) != old || j.NewMemberID == 0 || uint64(j.NewMemberID) == old {
		t.Fatalf("journal: old %x new %x, want old %x and a new ID", uint64(j.OldMemberID), uint64(j.NewMemberID), old)
	}
	if len(logMessages(t, agentLog(t, l, node), "data-dir-stale")) == 0 {
		t.Errorf("%s's agent never said data-dir-stale", node)
	}
	resp, err := cli.Get(ctx, "/uc2-restored/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != keys {
		t.Fatalf("%d of the %d keys written before the restore are there", resp.Count, keys)
	}
	r, err := chk.Finish(ctx, invariant.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", ns, r)
}

// ensureHostedNotLeader moves a hosted cluster's leadership away from the
// member at client URL ep (see ensureNotLeader: a fault on the leader is
// etcd's own disruption, not what a scenario measures).
func ensureHostedNotLeader(t *testing.T, l *lab.Lab, ns, ep string) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("%s's leader is not %s", ns, ep), func() error {
		cli, err := l.HostedEtcdClient(ns)
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := cli.Status(ctx, ep)
		if err != nil {
			return err
		}
		if st.Leader != st.Header.MemberId {
			return nil
		}
		for _, other := range l.HostedClientURLs(ns) {
			if other == ep {
				continue
			}
			o, err := cli.Status(ctx, other)
			if err != nil || o.IsLearner {
				continue
			}
			lc, err := l.EtcdClientFor(ep)
			if err != nil {
				return err
			}
			defer lc.Close()
			if _, err := lc.MoveLeader(ctx, o.Header.MemberId); err != nil {
				return err
			}
			return fmt.Errorf("leadership moved to %x; checking again", o.Header.MemberId)
		}
		return fmt.Errorf("no other member to move leadership to")
	})
}
