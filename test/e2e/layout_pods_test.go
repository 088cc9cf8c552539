package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
)

// TestStatefulSetMembersInRealWorldLayouts (issue 38's layout matrix,
// StatefulSet members on local PVs): clusters-a runs with the claim
// mounted right at --data-dir (the data dir is the PV's path, as some
// charts do); clusters-b mounts the claim twice, with subPath data right at
// --data-dir and a dedicated --wal-dir in the same claim.
//   - Both clusters are left alone for 2 min: no journal, members unchanged.
//   - A SIGKILLed member of each is restarted by its kubelet through the
//     gate and serves again under its own ID.
//   - A wiped member of each heals: the PV's path and the subPath dir are
//     never renamed (a held pod's bind mount would follow), raft mode,
//     HashKV equal, no failed write.
func TestStatefulSetMembersInRealWorldLayouts(t *testing.T) {
	l := newLab(t, lab.Options{Management: true, Nodes: 3, HostedClusters: 2, Agents: true,
		AgentArgs:     []string{"--grace-period=" + killGrace.String()},
		HostedLayouts: []string{lab.HostedLayoutVolumeRoot, lab.HostedLayoutSubPathWALDir}})
	ctx := context.Background()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	clusters := l.Spec.Management.HostedClusters
	placement := map[string]map[string]string{}
	ids := map[string][]string{}
	for _, ns := range clusters {
		placement[ns] = checkHostedPlacement(t, l, kc, ns)
		ids[ns] = hostedMemberIDs(t, l, ns)
	}
	volumeRoot, subPathWAL := clusters[0], clusters[1]
	pv := func(ns, pod string) string {
		d, err := l.PodPVDir(ctx, ns, pod)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	wantLaidOut := func() {
		t.Helper()
		for _, pod := range []string{"etcd-0", "etcd-1", "etcd-2"} {
			for _, glob := range []string{
				filepath.Join(pv(volumeRoot, pod), "member", "wal", "*.wal"),
				filepath.Join(pv(subPathWAL, pod), "data", "member", "snap", "db"),
				filepath.Join(pv(subPathWAL, pod), "wal", "*.wal"),
			} {
				if m, _ := filepath.Glob(glob); len(m) == 0 {
					t.Fatalf("no %s: the lab did not lay the member out", glob)
				}
			}
		}
	}
	wantLaidOut()
	// etcd-0 leads: etcd-1 is SIGKILLed and etcd-2 wiped below, and a
	// killed leader's writes fail until etcd's election (not the agent's).
	for _, ns := range clusters {
		moveHostedLeaderTo(t, l, ns, placement[ns], "etcd-0")
	}
	checkers := startHostedCheckers(t, l, clusters)

	noJournal := func(ns string) {
		t.Helper()
		for pod, node := range placement[ns] {
			if j, ok, _ := journal.Load(lab.HostedMemberStateDir(*mustNode(t, l, node), ns, pod), pod); ok {
				t.Fatalf("%s/%s: a recovery was opened (%s %s %s)", ns, pod, j.Phase, j.Result, j.Reason)
			}
		}
	}
	for until := time.Now().Add(layoutQuiet); time.Now().Before(until); time.Sleep(2 * time.Second) {
		for _, ns := range clusters {
			noJournal(ns)
			if now := hostedMemberIDs(t, l, ns); !slices.Equal(now, ids[ns]) {
				t.Fatalf("%s: members changed while healthy: %v -> %v", ns, ids[ns], now)
			}
		}
	}
	t.Logf("both clusters left alone for %s", layoutQuiet)

	for _, ns := range clusters {
		var killed int
		if err := checkers[ns].HardFault(func() (err error) { killed, err = l.SignalPod(ctx, ns, "etcd-1", syscall.SIGKILL); return err }); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		eventually(t, 90*time.Second, ns+"/etcd-1 serves again under its own ID", func() error {
			pid, err := l.PodContainerPID(ctx, ns, "etcd-1", "etcd")
			if err != nil || pid == killed {
				return fmt.Errorf("etcd pid %d (killed %d): %v", pid, killed, err)
			}
			if err := hostedVotersHealthy(ctx, l, ns); err != nil {
				return err
			}
			if now := hostedMemberIDs(t, l, ns); !slices.Equal(now, ids[ns]) {
				return fmt.Errorf("members %v, want %v", now, ids[ns])
			}
			return nil
		})
		noJournal(ns)
		t.Logf("%s/etcd-1: SIGKILLed, back under its own ID in %s", ns, time.Since(at).Round(time.Millisecond))
	}

	oldIDs := map[string]string{}
	for _, ns := range clusters {
		oldIDs[ns] = hostedMemberID(t, l, ns, "etcd-2")
	}
	for _, ns := range clusters { // an election meanwhile: a hand-off, excused
		moveHostedLeaderTo(t, l, ns, placement[ns], "etcd-0")
	}
	faultAt := time.Now()
	for _, ns := range clusters {
		if err := l.WipePodData(ctx, ns, "etcd-2"); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ ns, fallback string }{{volumeRoot, "data-dir-volume-root"}, {subPathWAL, "dedicated-wal-dir"}} {
		node := placement[c.ns]["etcd-2"]
		old := oldIDs[c.ns]
		var j journal.Record
		eventually(t, 3*time.Minute, c.ns+"/etcd-2 healed by the agent on "+node, func() error {
			var ok bool
			if j, ok, err = journal.Load(lab.HostedMemberStateDir(*mustNode(t, l, node), c.ns, "etcd-2"), "etcd-2"); err != nil || !ok {
				return fmt.Errorf("journal: ok=%v %v", ok, err)
			}
			if j.Result != journal.ResultSucceeded {
				return fmt.Errorf("journal phase %s result %q (%s)", j.Phase, j.Result, j.Message)
			}
			if id := hostedMemberID(t, l, c.ns, "etcd-2"); id == old {
				return fmt.Errorf("still member %s", id)
			}
			return hostedVotersHealthy(ctx, l, c.ns)
		})
		logPhases(t, j)
		if j.RejoinMode != "raft" || j.SeedFallback != c.fallback {
			t.Fatalf("%s: rejoin mode %q fallback %q, want raft for %s", c.ns, j.RejoinMode, j.SeedFallback, c.fallback)
		}
		// The data dir is a mount root in etcd's container either way: the
		// pre-change backup is kept inside it, on the PV.
		data, err := l.PodDataDir(ctx, c.ns, "etcd-2")
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Dir(j.SnapshotPath) != filepath.Join(data, localdisk.VolumeQuarantineDirName) {
			t.Fatalf("%s: pre-change backup at %q, want inside the data dir %s", c.ns, j.SnapshotPath, data)
		}
		if _, err := os.Stat(j.SnapshotPath); err != nil {
			t.Fatalf("%s: %v", c.ns, err)
		}
		t.Logf("%s/etcd-2 on %s: wiped, healed in %s", c.ns, node, j.FinishedAt.Sub(faultAt).Round(100*time.Millisecond))
	}
	wantLaidOut() // the learners in the same layouts
	for _, ns := range clusters {
		r, err := checkers[ns].Finish(ctx, invariant.Options{LeaderHandOffs: leaderHandOffs(t, l)})
		if err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
		t.Logf("%s: %s", ns, r)
	}
}
