package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
