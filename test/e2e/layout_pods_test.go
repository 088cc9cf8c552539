package e2e

import (
	"cmp"
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
// --data-dir and a dedicated --wal-dir in the same claim; clusters-c's
// --data-dir is a symlink to another dir of the claim (data -> data-v1, as
// a chart's migration leaves it); clusters-d serves TLS (a subdir).
//   - The clusters are left alone for 2 min: no journal, members unchanged.
//   - A SIGKILLed member of each is restarted by its kubelet through the
//     gate and serves again under its own ID.
//   - A wiped member of each heals: the PV's path and the subPath dir are
//     never renamed (a held pod's bind mount would follow), the link and
//     its target stay, raft mode, HashKV equal, no failed write.
func TestStatefulSetMembersInRealWorldLayouts(t *testing.T) {
	layouts := []hostedLayoutCase{
		{layout: lab.HostedLayoutVolumeRoot, fallback: "data-dir-volume-root",
			laidOut: func(pv string) error { return globs(filepath.Join(pv, "member", "wal", "*.wal")) }},
		{layout: lab.HostedLayoutSubPathWALDir, fallback: "dedicated-wal-dir",
			laidOut: func(pv string) error {
				return globs(filepath.Join(pv, "data", "member", "snap", "db"), filepath.Join(pv, "wal", "*.wal"))
			}},
		{layout: lab.HostedLayoutSymlink, fallback: "data-dir-symlink", laidOut: symlinkLaidOut},
		// TLS on (client and peer, client cert auth, a CA of the cluster's
		// own, certs from a Secret): the agent reaches the member with the
		// client cert its pod's start gate uses. The data dir a plain subdir:
		// renamed aside, the learner seeded.
		{layout: lab.HostedLayoutSubdir, tls: true, rejoin: "seed",
			laidOut: func(pv string) error { return globs(filepath.Join(pv, "data", "member", "wal", "*.wal")) }},
	}
	var opts []string
	var tls []bool
	for _, c := range layouts {
		opts, tls = append(opts, c.layout), append(tls, c.tls)
	}
	l := newLab(t, lab.Options{Management: true, Nodes: 3, HostedClusters: len(layouts), Agents: true,
		AgentArgs: []string{"--grace-period=" + killGrace.String()}, HostedLayouts: opts, HostedTLS: tls})
	clusters := l.Spec.Management.HostedClusters
	for i := range layouts {
		layouts[i].ns = clusters[i]
	}
	runHostedLayoutMatrix(t, l, layouts)
}

// hostedLayoutCase is one hosted cluster of the layout matrix: its layout
// (and TLS), the rejoin mode ("": raft) and seed fallback its heal must
// journal, and how its member's files lie in its PV.
type hostedLayoutCase struct {
	ns, layout, rejoin, fallback string
	tls                          bool
	laidOut                      func(pv string) error
}

func (c hostedLayoutCase) name() string {
	n := cmp.Or(c.layout, "subdir")
	if c.tls {
		n += ", TLS"
	}
	return n
}

// globs: each glob matches a file.
func globs(patterns ...string) error {
	for _, g := range patterns {
		if m, _ := filepath.Glob(g); len(m) == 0 {
			return fmt.Errorf("no %s", g)
		}
	}
	return nil
}

// symlinkLaidOut: the PV's data is a link to data-v1, which holds the
// member.
func symlinkLaidOut(pv string) error {
	target := lab.HostedSymlinkTarget(pv)
	if got, err := os.Readlink(filepath.Join(pv, "data")); err != nil || filepath.Join(pv, got) != target {
		return fmt.Errorf("%s/data links to %q (%v), want %s", pv, got, err, target)
	}
	return globs(filepath.Join(target, "member", "wal", "*.wal"), filepath.Join(target, "member", "snap", "db"))
}

// runHostedLayoutMatrix runs the layout matrix's three checks on each
// hosted cluster: left alone for 2 min, a SIGKILLed member back under its
// own ID, a wiped member healed in raft mode with its layout kept.
func runHostedLayoutMatrix(t *testing.T, l *lab.Lab, layouts []hostedLayoutCase) {
	ctx := context.Background()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	var clusters []string
	placement := map[string]map[string]string{}
	ids := map[string][]string{}
	for _, c := range layouts {
		clusters = append(clusters, c.ns)
		placement[c.ns] = checkHostedPlacement(t, l, kc, c.ns)
		ids[c.ns] = hostedMemberIDs(t, l, c.ns)
	}
	pv := func(ns, pod string) string {
		d, err := l.PodPVDir(ctx, ns, pod)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	wantLaidOut := func() {
		t.Helper()
		for _, c := range layouts {
			for _, pod := range []string{"etcd-0", "etcd-1", "etcd-2"} {
				if err := c.laidOut(pv(c.ns, pod)); err != nil {
					t.Fatalf("%s/%s (%s): %v: the lab did not lay the member out", c.ns, pod, c.name(), err)
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
	t.Logf("%d clusters left alone for %s", len(clusters), layoutQuiet)

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
	for _, c := range layouts {
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
		if want := cmp.Or(c.rejoin, "raft"); j.RejoinMode != want || j.SeedFallback != c.fallback {
			t.Fatalf("%s: rejoin mode %q fallback %q, want %s (fallback %q)", c.ns, j.RejoinMode, j.SeedFallback, want, c.fallback)
		}
		// A data dir at a mount root in etcd's container keeps the
		// pre-change backup inside it; a plain subdir or a link has it
		// beside it, in the PV's root. Either way on the PV.
		qdir, err := l.PodDataDir(ctx, c.ns, "etcd-2")
		if err != nil {
			t.Fatal(err)
		}
		if c.layout == lab.HostedLayoutSubdir || c.layout == lab.HostedLayoutSymlink {
			qdir = filepath.Dir(qdir)
		}
		if filepath.Dir(j.SnapshotPath) != filepath.Join(qdir, localdisk.VolumeQuarantineDirName) {
			t.Fatalf("%s: pre-change backup at %q, want in %s", c.ns, j.SnapshotPath, filepath.Join(qdir, localdisk.VolumeQuarantineDirName))
		}
		if _, err := os.Stat(j.SnapshotPath); err != nil {
			t.Fatalf("%s: %v", c.ns, err)
		}
		t.Logf("%s/etcd-2 on %s (%s): wiped, healed in %s", c.ns, node, c.name(), j.FinishedAt.Sub(faultAt).Round(100*time.Millisecond))
	}
	wantLaidOut() // the learners in the same layouts
	for _, ns := range clusters {
		r, err := checkers[ns].Finish(ctx, invariant.Options{LeaderHandOffs: leaderHandOffs(t, l), PurgeCrashes: podPurgeCrashes(t, l, ns)})
		if err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
		t.Logf("%s: %s", ns, r)
	}
}
