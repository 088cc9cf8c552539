package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// TestMajorityLostRestoreFromTheSurvivorRunsAsWritten: the runbooks'
// "Majority lost: restore" from the most up-to-date survivor, run as
// written, with no agent running: node2's and node3's data dirs are gone
// for good (their manifests kept out of the kubelet's dir), node1 (the
// leader when they went: every acknowledged write is in its log) is left
// without quorum. The other members stopped first (majority-lost-stop on
// each: nothing runs, their data kept); the survivor's procedure on node1 copies its data dir
// and makes it a one-member cluster (--force-new-cluster, then without);
// the rejoin procedure on node2, then node3, adds each as a new learner
// and promotes it. The promise: node1 keeps its member ID and every write
// it acknowledged, the others serve under new IDs, HashKV is equal, the
// survivor's data dir was copied first.
func TestMajorityLostRestoreFromTheSurvivorRunsAsWritten(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, EtcdTLS: true})
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2", "node3")
	n1 := nodeOf(t, l, "node1")
	h := startHealVia(t, l, n1.ClientURL)
	waitWrites(t, h.chk, 10)
	// With quorum, the survivor's procedure stops at its first check and
	// changes nothing (a bare "! E endpoint health" went on to force).
	early := loadProcedure(t, "majority-lost-survivor")
	early.subst = []string{"M=cp-1 PEER=https://10.0.0.11:2380", "M=" + n1.Member + " PEER=" + n1.PeerURL}
	early.onNode(t, l, "node1", []string{n1.ClientURL})
	if out, err := early.exec(t, 2*time.Minute); err == nil {
		t.Fatalf("the survivor's procedure ran through on a cluster with quorum:\n%s", out)
	}
	if _, err := os.Stat(n1.EtcdManifest()); err != nil || len(mustMembers(t, l)) != 3 {
		t.Fatalf("the refused procedure changed something: node1's manifest %v, members %v", err, mustMembers(t, l))
	}
	// So does the stop on a member that sees the quorum (a partition: it
	// may have one with members this node cannot reach): its member keeps
	// running on its data.
	n2 := nodeOf(t, l, "node2")
	earlyStop := loadProcedure(t, "majority-lost-stop")
	earlyStop.subst = []string{"PEER=https://10.0.0.11:2380", "PEER=" + n2.PeerURL, "CLIENT=https://10.0.0.11:2379", "CLIENT=" + n2.ClientURL}
	earlyStop.onNodeIn(t, l, "node2", []string{n2.ClientURL}, t.TempDir())
	if out, err := earlyStop.exec(t, 2*time.Minute); err == nil {
		t.Fatalf("the stop procedure ran through on a member that sees a quorum:\n%s", out)
	}
	if _, err := os.Stat(n2.EtcdManifest()); err != nil || len(mustMembers(t, l)) != 3 {
		t.Fatalf("the refused stop changed something: node2's manifest %v, members %v", err, mustMembers(t, l))
	}
	for _, n := range []string{"node2", "node3"} {
		if err := l.StopMember(n); err != nil {
			t.Fatal(err)
		}
		if err := l.WipeDataDir(n); err != nil {
			t.Fatal(err)
		}
	}
	h.fault()

	// Every member but the survivor stopped first, its data kept (their
	// manifests, kept out of the kubelet's dir, where the doc expects them).
	roots := stopByHand(t, l, []string{"node2", "node3"}, map[string]bool{"node2": true, "node3": true})
	survivor := loadProcedure(t, "majority-lost-survivor")
	survivor.subst = []string{"M=cp-1 PEER=https://10.0.0.11:2380", "M=" + n1.Member + " PEER=" + n1.PeerURL}
	survivor.onNode(t, l, "node1", []string{n1.ClientURL})
	survivor.run(t, 10*time.Minute)
	if ms := mustMembers(t, l); len(ms) != 1 || ms[0].ID != before[n1.PeerURL] {
		t.Fatalf("after the survivor's procedure: members %+v, want node1 alone under its ID %x", ms, before[n1.PeerURL])
	}
	copies, _ := filepath.Glob(filepath.Join(n1.DiskDir, "etcd-agent-quarantine", "etcd-majority-lost-*", "member", "snap", "db"))
	if len(copies) != 1 {
		t.Fatalf("the survivor's data dir copied: %v, want one copy", copies)
	}

	for _, name := range []string{"node2", "node3"} {
		n := nodeOf(t, l, name)
		p := loadProcedure(t, "majority-lost-rejoin")
		p.subst = []string{"M=cp-2 PEER=https://10.0.0.12:2380", "M=" + n.Member + " PEER=" + n.PeerURL}
		p.onNodeIn(t, l, name, []string{n1.ClientURL}, roots[name])
		p.run(t, 12*time.Minute)
	}

	if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	after := idsByPeer(mustMembers(t, l))
	if after[n1.PeerURL] != before[n1.PeerURL] {
		t.Fatalf("node1's member %x, was %x: the survivor keeps its ID", after[n1.PeerURL], before[n1.PeerURL])
	}
	for _, name := range []string{"node2", "node3"} {
		if p := peerOf(t, l, name); after[p] == 0 || after[p] == before[p] {
			t.Fatalf("%s's member: before %x, after %x: want a new member ID", name, before[p], after[p])
		}
	}
	h.finish(invariant.Options{AllowQuorumLoss: true, AllowFailedWrites: true})
}

// TestUC3ByHandRunsAsWritten: recovery.md's UC3 by hand (add first), run
// as written with no agent running: on node4 (new, its manifest as its
// provisioning wrote it in /root/etcd.yaml) the backup, the learner, its
// start and promotion; then on node2 the stop, its data dir kept, the
// removal. Writes go on throughout; none fails or is lost, the cluster
// never has fewer than 3 voters, node4 serves as a voter, node2's member
// is gone, HashKV is equal.
func TestUC3ByHandRunsAsWritten(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, lab.Options{Nodes: 3, EtcdTLS: true})
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2")
	n1, n2, n3 := nodeOf(t, l, "node1"), nodeOf(t, l, "node2"), nodeOf(t, l, "node3")
	h := startHealVia(t, l, n1.ClientURL, n3.ClientURL)
	waitWrites(t, h.chk, 10)
	n4, err := l.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(t.TempDir(), "etcd.yaml")
	if n4, err = l.WriteNewMemberManifest(n4.Name, held); err != nil {
		t.Fatal(err)
	}
	h.fault()

	add := loadProcedure(t, "uc3-add")
	add.subst = []string{"B=cp-4 PEER_B=https://10.0.0.14:2380", "B=" + n4.Member + " PEER_B=" + n4.PeerURL}
	add.onNode(t, l, n4.Name, []string{n3.ClientURL})
	if err := os.Rename(held, filepath.Join(add.root, "etcd.yaml")); err != nil {
		t.Fatal(err)
	}
	add.run(t, 12*time.Minute)
	if _, err := os.Stat(filepath.Join(add.root, "etcd-before-move.db")); err != nil {
		t.Fatalf("the backup: %v", err)
	}

	retire := loadProcedure(t, "uc3-retire")
	retire.subst = []string{"A=cp-2 PEER_A=https://10.0.0.12:2380", "A=" + n2.Member + " PEER_A=" + n2.PeerURL}
	retire.onNode(t, l, "node2", []string{n3.ClientURL})
	retire.run(t, 5*time.Minute)
	if err := l.MemberMovedAway("node2"); err != nil {
		t.Fatal(err)
	}

	if err := l.WaitHealthy(ctx, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	after := idsByPeer(mustMembers(t, l))
	if len(after) != 3 || after[n4.PeerURL] == 0 || after[n2.PeerURL] != 0 || after[n1.PeerURL] != before[n1.PeerURL] || after[n3.PeerURL] != before[n3.PeerURL] {
		t.Fatalf("members after the move %v (before %v): want node1 and node3 as they were, node4 new, node2 gone", after, before)
	}
	kept, _ := filepath.Glob(filepath.Join(n2.DiskDir, "etcd-agent-quarantine", "etcd-moved-*", "member", "snap", "db"))
	if len(kept) != 1 {
		t.Fatalf("node2's data dir kept: %v, want one copy", kept)
	}
	rep := h.finish(invariantDefaults())
	for _, m := range rep.Memberships { // add first: never fewer voters than before
		if n := strings.Count(m, "/voter"); n < 3 {
			t.Fatalf("a membership with %d voters: %s", n, m)
		}
	}
}

// TestMajorityLostRestoreFromASnapshotRunsAsWritten: the runbooks'
// majority-lost restore from a snapshot, run as written with no agent
// running: node2's and node3's data dirs gone; every member stopped
// (majority-lost-stop on each node), then each node restores the same
// snapshot for its own member and starts it (snapshot-restore-start), then
// the check (snapshot-restore-verify). The promise: the cluster serves the
// snapshot's keys and none written after it, under a new cluster ID, every
// member healthy with equal HashKV, and node1's old data dir kept. On
// etcd 3.6 and 3.5, each restored with the etcdutl of its own release, as
// "Reaching etcd" tells (issue 40).
func TestMajorityLostRestoreFromASnapshotRunsAsWritten(t *testing.T) {
	onVersions(t, majorityLostRestoreFromASnapshot, etcd36, etcd35())
}

func majorityLostRestoreFromASnapshot(t *testing.T, e etcdUnderTest) {
	ctx := context.Background()
	l := newLab(t, lab.Options{Nodes: 3, EtcdTLS: true, EtcdBinary: e.binary})
	requireVersion(t, l, e.version)
	etcdutl := etcdutlOf(t, e)
	n1 := nodeOf(t, l, "node1")
	cli, err := l.EtcdClientFor(n1.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(prefix string) {
		for i := range 10 {
			eventually(t, 30*time.Second, "put "+prefix, func() error {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				_, err := cli.Put(rctx, fmt.Sprintf("%s%02d", prefix, i), "v")
				return err
			})
		}
	}
	put("/runbook/before/")
	backup := filepath.Join(t.TempDir(), "backup.db")
	takeSnapshot(t, cli, backup)
	put("/runbook/after/")
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldCluster := ml.Header.ClusterId
	for _, n := range []string{"node2", "node3"} {
		if err := l.StopMember(n); err != nil {
			t.Fatal(err)
		}
		if err := l.WipeDataDir(n); err != nil {
			t.Fatal(err)
		}
	}

	names := []string{"node1", "node2", "node3"}
	var ic []string
	for _, name := range names {
		n := nodeOf(t, l, name)
		ic = append(ic, n.Member+"="+n.PeerURL)
	}
	roots := stopByHand(t, l, names, map[string]bool{"node2": true, "node3": true})
	for _, name := range names {
		n := nodeOf(t, l, name)
		copyFile(t, backup, filepath.Join(roots[name], "backup.db"))
		p := loadProcedure(t, "snapshot-restore-start")
		p.subst = []string{"M=cp-1 PEER=https://10.0.0.11:2380", "M=" + n.Member + " PEER=" + n.PeerURL,
			"IC=cp-1=https://10.0.0.11:2380,cp-2=https://10.0.0.12:2380,cp-3=https://10.0.0.13:2380", "IC=" + strings.Join(ic, ",")}
		p.onNodeIn(t, l, name, []string{n.ClientURL}, roots[name])
		p.prelude += "export PATH=" + etcdutl + ":$PATH\n"
		p.run(t, 3*time.Minute)
	}
	verify := loadProcedure(t, "snapshot-restore-verify")
	verify.onNode(t, l, "node1", l.Spec.ClientURLs())
	verify.run(t, 5*time.Minute)

	if err := l.WaitHealthy(ctx, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	var before, after int64
	eventually(t, 30*time.Second, "read the restored keys", func() error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		b, err := cli.Get(rctx, "/runbook/before/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		a, err := cli.Get(rctx, "/runbook/after/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		before, after = b.Count, a.Count
		if a.Header.ClusterId == oldCluster {
			return fmt.Errorf("cluster ID %x: the old one", a.Header.ClusterId)
		}
		return nil
	})
	if before != 10 || after != 0 {
		t.Fatalf("after the restore: %d keys written before the snapshot (want 10), %d after it (want 0)", before, after)
	}
	kept, _ := filepath.Glob(filepath.Join(n1.DiskDir, "etcd-agent-quarantine", "etcd-before-restore-*", "member", "snap", "db"))
	if len(kept) != 1 {
		t.Fatalf("node1's old data dir kept: %v, want one", kept)
	}
}

// stopByHand runs majority-lost-stop on each node, each with its own /root
// (returned by node, for its later procedures); the nodes in lostData had
// their member stopped by the lab, whose manifest is put where the doc
// keeps it out of the kubelet's dir.
func stopByHand(t *testing.T, l *lab.Lab, nodes []string, lostData map[string]bool) map[string]string {
	t.Helper()
	roots := map[string]string{}
	for _, name := range nodes {
		n := nodeOf(t, l, name)
		roots[name] = t.TempDir()
		if lostData[name] {
			if err := os.Rename(n.StoppedManifest(), filepath.Join(roots[name], "etcd.yaml.parked")); err != nil {
				t.Fatal(err)
			}
		}
		p := loadProcedure(t, "majority-lost-stop")
		p.subst = []string{"PEER=https://10.0.0.11:2380", "PEER=" + n.PeerURL, "CLIENT=https://10.0.0.11:2379", "CLIENT=" + n.ClientURL}
		p.onNodeIn(t, l, name, []string{n.ClientURL}, roots[name])
		p.run(t, 3*time.Minute)
	}
	return roots
}

// takeSnapshot saves cli's first endpoint's snapshot to path.
func takeSnapshot(t *testing.T, cli *clientv3.Client, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, r); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// etcdutlOf is a dir whose etcdutl is the one of e's release (bin/etcdutl
// is 3.6's), first in a procedure's PATH.
func etcdutlOf(t *testing.T, e etcdUnderTest) string {
	t.Helper()
	src := filepath.Join(binDir, "etcdutl")
	if e.version == "3.5." {
		src = filepath.Join(binDir, "etcdutl-3.5")
	}
	out, err := exec.Command(src, "version").Output()
	if err != nil || !strings.Contains(string(out), "etcdutl version: "+e.version) {
		t.Fatalf("%s version: %q (%v), want %s*", src, out, err, e.version)
	}
	dir := t.TempDir()
	if err := os.Symlink(src, filepath.Join(dir, "etcdutl")); err != nil {
		t.Fatal(err)
	}
	return dir
}
