package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// walDirQuiet is how long a healthy cluster on dedicated WAL dirs is
// watched for any heal or hold (issue 38's acceptance: 2 min).
const walDirQuiet = 2 * time.Minute

// TestAClusterOnDedicatedWALDirs (issue 38): every member runs with
// --wal-dir on a hostPath volume of its own, as etcd's tuning guide lays a
// WAL on its own disk. Before, node1's healthy voter was judged corrupt
// ("member/wal is missing while the member dir exists"), removed and
// replaced by a learner that started on the removed member's WAL. Now:
//   - the healthy cluster is left alone for 2 min (membership unchanged, no
//     recovery, every agent says its data dir is ok);
//   - a SIGKILLed member is restarted by its supervisor through the gate and
//     serves again under its own ID;
//   - a wiped member (data and WAL dir) heals in raft mode (seeding does
//     not build a dedicated WAL dir: dedicated-wal-dir), HashKV equal, no
//     failed write.
func TestAClusterOnDedicatedWALDirs(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdWALDir: true})
	for _, n := range []string{"node1", "node2", "node3"} {
		node := nodeOf(t, l, n)
		segs, _ := filepath.Glob(filepath.Join(node.WALDir, "*.wal"))
		if node.WALDir == "" || len(segs) == 0 {
			t.Fatalf("%s: WAL dir %q holds %d segments; the lab did not run it with --wal-dir", n, node.WALDir, len(segs))
		}
		if _, err := os.Stat(filepath.Join(node.DataDir, "member", "wal")); err == nil {
			t.Fatalf("%s: etcd wrote member/wal in the data dir though it runs with --wal-dir", n)
		}
	}
	// Neither node1 (SIGKILLed below) nor node2 (wiped) leads: a killed
	// leader fails the writes proposed to it until the election (etcd's,
	// not the agent's; seen in CI: "request timed out, possibly due to
	// previous leader failure" just after node1's kill), and the steering
	// happens before the checker starts, so none of its drops count.
	ensureNotLeader(t, l, "node1", "node2")
	before := idsByPeer(mustMembers(t, l))
	h := startHeal(t, l)

	quietUntil := time.Now().Add(walDirQuiet)
	for time.Now().Before(quietUntil) {
		for _, n := range []string{"node1", "node2", "node3"} {
			assertNoRecovery(t, l, n, n)
			if s, dd, err := agentState(l, n); err == nil && (dd != "ok" && dd != "in-use" || s != "healthy") {
				t.Fatalf("%s's agent says %s with its data dir %s; want healthy, ok", n, s, dd)
			}
		}
		if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
			t.Fatalf("the membership of a healthy cluster changed: before %v, now %v", before, now)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("healthy on dedicated WAL dirs for %s: no recovery, membership %v", walDirQuiet, before)

	var killed int
	if err := h.chk.HardFault(func() (err error) { killed, err = l.KillMember("node1"); return err }); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	eventually(t, 60*time.Second, "node1 serves again under its own ID after the SIGKILL", func() error {
		pid, err := l.EtcdPID("node1")
		if err != nil || pid == killed {
			return fmt.Errorf("etcd pid %d (killed %d): %v", pid, killed, err)
		}
		if s, _, err := agentState(l, "node1"); err != nil || s != "healthy" {
			return fmt.Errorf("node1's agent says %s (%v)", s, err)
		}
		if now := serializableIDs(t, l, "node1"); !sameIDs(now, before) {
			return fmt.Errorf("node1 sees %v, want %v", now, before)
		}
		return nil
	})
	assertNoRecovery(t, l, "node1", "node1")
	t.Logf("node1: SIGKILLed, back under its own ID %x in %s", before[peerOf(t, l, "node1")], time.Since(killedAt).Round(time.Millisecond))

	// An election meanwhile (a loaded machine) may have made node2 the
	// leader: moved off again, the hand-off excused as such.
	ml, err := h.cli.MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	steerFrom := time.Now()
	ensureNotLeader(t, l, "node2")
	steered := invariant.LeaderHandOff{ClusterID: ml.Header.ClusterId, From: steerFrom, To: time.Now()}
	waitStopWatchConnected(t, l, "node2")
	h.fault()
	if err := l.WipeDataDir("node2"); err != nil { // its data dir and its WAL dir
		t.Fatal(err)
	}
	j := h.waitHealed("node2", "node2", 3, 2*time.Minute)
	logPhases(t, j)
	if uint64(j.OldMemberID) != before[peerOf(t, l, "node2")] || j.NewMemberID == 0 {
		t.Fatalf("journal: old %x new %x, want old %x replaced", uint64(j.OldMemberID), uint64(j.NewMemberID), before[peerOf(t, l, "node2")])
	}
	if j.RejoinMode != "raft" || j.SeedFallback != "dedicated-wal-dir" {
		t.Fatalf("rejoin mode %q fallback %q, want raft for dedicated-wal-dir", j.RejoinMode, j.SeedFallback)
	}
	node2 := nodeOf(t, l, "node2")
	if segs, _ := filepath.Glob(filepath.Join(node2.WALDir, "*.wal")); len(segs) == 0 {
		t.Fatalf("the learner wrote no WAL in its dedicated WAL dir %s", node2.WALDir)
	}
	if _, err := os.Stat(filepath.Join(node2.DataDir, "member", "wal")); err == nil {
		t.Fatalf("the learner's WAL is in its data dir, not in --wal-dir")
	}
	rep := h.finish(invariant.Options{LeaderHandOffs: []invariant.LeaderHandOff{steered}})
	t.Logf("node2: wiped with its WAL dir, healed in %s (raft mode), api writes failed %d", j.FinishedAt.Sub(h.faultAt).Round(time.Millisecond), rep.Writes.APIFailed)
}
