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
)

// layoutQuiet is how long a healthy cluster in a real-world layout is
// watched for any heal or hold (issue 38's acceptance: 2 min).
const layoutQuiet = 2 * time.Minute

// killGrace is the agents' grace period where a member is SIGKILLed and
// must come back under its own ID: its supervisor's restart takes seconds
// on a loaded machine (seen: 4.3 s), longer than the lab's 3 s grace, after
// which a member that does not serve is healed (a wiped member that still
// serves waits for it too). A wiped or corrupt member that does not serve
// is lost at once, whatever the grace.
const killGrace = 20 * time.Second

// TestAClusterOnMixedDataDirLayouts (issue 38's layout matrix, static
// pods, TLS on): node1's data dir is a mount point (a dedicated etcd disk at
// /var/lib/etcd), node2's a symlink to a dedicated disk's dir, node3's a
// plain dir (kubeadm).
//   - The healthy cluster is left alone for 2 min.
//   - A SIGKILLed member of each layout is restarted through the gate and
//     serves again under its own ID.
//   - node1's wiped member heals on its still-mounted disk; node2's member
//     with a corrupt db heals with the link kept pointing at its disk and
//     the old member/ set aside inside the link's target (before, the link
//     itself was renamed and the learner started on the root disk), HashKV
//     equal.
func TestAClusterOnMixedDataDirLayouts(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdTLS: true, AgentArgs: []string{"--grace-period=" + killGrace.String()},
		DataDirLayouts: []string{lab.LayoutMountPoint, lab.LayoutSymlink, lab.LayoutSubdir}})
	node1, node2 := nodeOf(t, l, "node1"), nodeOf(t, l, "node2")
	wantLayouts(t, node1, node2)

	// Neither node1 nor node2 (both killed and wiped below) leads: a killed
	// leader's writes fail until etcd's election, not the agent's doing.
	ensureNotLeader(t, l, "node1", "node2")
	before := idsByPeer(mustMembers(t, l))
	h := startHeal(t, l)
	leftAlone(t, l, layoutQuiet, before)
	for _, n := range []string{"node1", "node2"} {
		killedComesBack(t, l, h, n, before)
	}

	// node1 is wiped (its disk emptied, still mounted: nothing to set
	// aside, the learner starts on it); node2's db is corrupted while it is
	// stopped (the gate holds it: its member/ is set aside inside the link's
	// target, on its disk).
	var handOffs []invariant.LeaderHandOff
	for _, c := range []struct{ node, fallback string }{{"node1", "data-dir-volume-root"}, {"node2", "data-dir-symlink"}} {
		handOffs = append(handOffs, steerOff(t, l, h, c.node))
		waitStopWatchConnected(t, l, c.node)
		if c.node == "node2" {
			if err := l.StopMember(c.node); err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, c.node+"'s agent sees its member stopped", func() error {
				if s, _, err := agentState(l, c.node); err != nil || s == "healthy" {
					return fmt.Errorf("state %s (%v)", s, err)
				}
				return nil
			})
		}
		h.fault()
		fault := l.WipeDataDir
		if c.node == "node2" {
			fault = l.CorruptDB
		}
		if err := fault(c.node); err != nil {
			t.Fatal(err)
		}
		if c.node == "node2" {
			if err := l.StartMember(c.node); err != nil {
				t.Fatal(err)
			}
		}
		j := h.waitHealed(c.node, c.node, 3, 2*time.Minute)
		if uint64(j.OldMemberID) != before[peerOf(t, l, c.node)] || j.NewMemberID == 0 {
			t.Fatalf("%s: journal old %x new %x, want old %x replaced", c.node, uint64(j.OldMemberID), uint64(j.NewMemberID), before[peerOf(t, l, c.node)])
		}
		if j.RejoinMode != "raft" || j.SeedFallback != c.fallback {
			t.Fatalf("%s: rejoin mode %q fallback %q, want raft for %s", c.node, j.RejoinMode, j.SeedFallback, c.fallback)
		}
		t.Logf("%s (%s): healed in %s, quarantine %q", c.node, nodeOf(t, l, c.node).DataDirLayout,
			j.FinishedAt.Sub(h.faultAt).Round(time.Millisecond), j.QuarantinePath)
		if c.node == "node2" {
			// The corrupt member data, set aside inside the link's target.
			want := filepath.Join(node2.DataDir, localdisk.VolumeQuarantineDirName)
			if filepath.Dir(j.QuarantinePath) != want {
				t.Fatalf("node2's member data set aside at %q, want inside %s", j.QuarantinePath, want)
			}
			for _, f := range []string{"snap/db", "wal/*.wal"} {
				if m, _ := filepath.Glob(filepath.Join(node2.DataDirTarget(), localdisk.VolumeQuarantineDirName, filepath.Base(j.QuarantinePath), f)); len(m) == 0 {
					t.Fatalf("node2's quarantined member data has no %s on the link's disk", f)
				}
			}
		}
	}
	wantLayouts(t, node1, node2) // the learners run in the same layouts
	rep := h.finish(invariant.Options{LeaderHandOffs: handOffs})
	t.Logf("mixed layouts: api writes failed %d of %d", rep.Writes.APIFailed, rep.Writes.APIAttempted)
}

// wantLayouts: node1's data dir is a mount point, node2's a symlink to its
// disk, each holding the running member's data.
func wantLayouts(t *testing.T, node1, node2 *lab.Node) {
	t.Helper()
	if mp, err := localdisk.IsMountPoint(node1.DataDir); err != nil || !mp {
		t.Fatalf("node1's data dir %s is no mount point (%v)", node1.DataDir, err)
	}
	if got, err := os.Readlink(node2.DataDir); err != nil || got != node2.DataDirTarget() {
		t.Fatalf("node2's data dir link points at %q (%v), want %s", got, err, node2.DataDirTarget())
	}
	for _, dir := range []string{node1.DataDir, node2.DataDirTarget()} {
		if segs, _ := filepath.Glob(filepath.Join(dir, "member", "wal", "*.wal")); len(segs) == 0 {
			t.Fatalf("%s holds no member/wal segment", dir)
		}
	}
}

// leftAlone watches a healthy cluster for d: no agent opens a recovery or
// says anything but healthy with its data dir ok, the membership stays.
func leftAlone(t *testing.T, l *lab.Lab, d time.Duration, before map[string]uint64) {
	t.Helper()
	var nodes []string
	for _, n := range l.Spec.Nodes {
		if n.Member != "" && !n.Lost {
			nodes = append(nodes, n.Name)
		}
	}
	for until := time.Now().Add(d); time.Now().Before(until); time.Sleep(2 * time.Second) {
		for _, n := range nodes {
			assertNoRecovery(t, l, n, n)
			if s, dd, err := agentState(l, n); err == nil && (dd != "ok" && dd != "in-use" || s != "healthy") {
				t.Fatalf("%s's agent says %s with its data dir %s; want healthy, ok", n, s, dd)
			}
		}
		if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
			t.Fatalf("the membership of a healthy cluster changed: before %v, now %v", before, now)
		}
	}
	t.Logf("healthy for %s: no recovery on %s, membership %v", d, strings.Join(nodes, ", "), before)
}

// killedComesBack SIGKILLs node's etcd (a hard fault for the checker) and
// waits until its supervisor restarted it through the gate and it serves
// under its own ID, without a recovery.
func killedComesBack(t *testing.T, l *lab.Lab, h *healRun, node string, before map[string]uint64) {
	t.Helper()
	var killed int
	if err := h.chk.HardFault(func() (err error) { killed, err = l.KillMember(node); return err }); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	eventually(t, 60*time.Second, node+" serves again under its own ID after the SIGKILL", func() error {
		pid, err := l.EtcdPID(node)
		if err != nil || pid == killed {
			return fmt.Errorf("etcd pid %d (killed %d): %v", pid, killed, err)
		}
		if s, _, err := agentState(l, node); err != nil || s != "healthy" {
			return fmt.Errorf("%s's agent says %s (%v)", node, s, err)
		}
		if now := serializableIDs(t, l, node); !sameIDs(now, before) {
			return fmt.Errorf("%s sees %v, want %v", node, now, before)
		}
		return nil
	})
	assertNoRecovery(t, l, node, node)
	t.Logf("%s: SIGKILLed, back under its own ID %x in %s", node, before[peerOf(t, l, node)], time.Since(killedAt).Round(time.Millisecond))
}

// steerOff moves the leadership off node (an election meanwhile may have
// made it the leader) and returns the hand-off for the checker to excuse.
func steerOff(t *testing.T, l *lab.Lab, h *healRun, node string) invariant.LeaderHandOff {
	t.Helper()
	ml, err := h.cli.MemberList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	ensureNotLeader(t, l, node)
	return invariant.LeaderHandOff{ClusterID: ml.Header.ClusterId, From: from, To: time.Now()}
}
