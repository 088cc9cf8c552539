package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

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
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdWALDir: true, AgentArgs: []string{"--grace-period=" + killGrace.String()}})
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
	leftAlone(t, l, layoutQuiet, before)
	killedComesBack(t, l, h, "node1", before)
	steered := steerOff(t, l, h, "node2")
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

// TestMovingAMembersWALToADedicatedDirUnderARunningAgent (issue 38, review):
// the operator's migration to a dedicated --wal-dir, done while the agents
// run: node3's member is stopped (its manifest moved out), member/wal moved
// to a dir of its own, --wal-dir added to the manifest, the manifest put
// back. Its agent must read the new identity: before, it kept looking for
// member/wal, judged the healthy voter's data dir corrupt and replaced it.
func TestMovingAMembersWALToADedicatedDirUnderARunningAgent(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true})
	ensureNotLeader(t, l, "node3")
	before := idsByPeer(mustMembers(t, l))
	h := startHeal(t, l)
	if err := l.StopMember("node3"); err != nil {
		t.Fatal(err)
	}
	if err := l.MoveWALToDedicatedDir("node3"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartMember("node3"); err != nil {
		t.Fatal(err)
	}
	node3 := nodeOf(t, l, "node3")
	// Serving is not enough before leftAlone looks: the agent last looked
	// while the member was stopped and says down until its next poll (seen
	// in CI: "node3's agent says down with its data dir ok" 0 s after node3
	// served). Its first look after the restart must say healthy, ok.
	eventually(t, 60*time.Second, "node3 serves on its dedicated WAL dir and its agent says so", func() error {
		if now := serializableIDs(t, l, "node3"); !sameIDs(now, before) {
			return fmt.Errorf("node3 sees %v, want %v", now, before)
		}
		if s, dd, err := agentState(l, "node3"); err != nil || s != "healthy" || dd != "ok" && dd != "in-use" {
			return fmt.Errorf("node3's agent says %s with its data dir %s (%v)", s, dd, err)
		}
		return nil
	})
	if segs, _ := filepath.Glob(filepath.Join(node3.WALDir, "*.wal")); len(segs) == 0 {
		t.Fatalf("no WAL segment in node3's --wal-dir %s", node3.WALDir)
	}
	leftAlone(t, l, 45*time.Second, before)
	h.finish(invariant.Options{})
}
