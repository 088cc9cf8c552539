package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Rolling upgrades (docs/plans/etcd-35.md, step 8): members of different
// etcd minors in one cluster, as during an operator's 3.5 → 3.6 upgrade,
// one node's manifest at a time. etcd runs the cluster at the lowest
// member's version until every member runs the newer one; a learner older
// than the cluster version (or than the members that stay) cannot join.

// upgradeGrace is the agents' grace period in these scenarios: a member
// restarted onto another etcd binary (stop, start gate, start on the old
// data dir) is down for seconds, longer than the lab's 3 s, and must be
// left alone, as an operator's upgrade is.
const upgradeGrace = "--grace-period=15s"

// reasonLearnerBelowCluster is the agent's refusal to add a learner whose
// etcd minor is below the cluster version or below the lowest minor of the
// members that stay.
const reasonLearnerBelowCluster = "learner-version-below-cluster"

// TestRollingUpgrade35To36WithMemberLost: a 3.5 cluster is upgraded to 3.6
// one member at a time under API write load, losing a member at each stage:
// (a) node1 → 3.6: healthy again, the cluster version stays 3.5;
// (b) node2 (3.5 manifest) wiped: healed in raft mode (the serving members
// mix minors, seed mode is proven per minor), by a 3.5 learner;
// (c) node2 → 3.6, node3 (3.5 manifest) wiped: the agent refuses before any
// membership change (a 3.5 learner beside two 3.6 voters would join a
// cluster whose version rises to 3.6 the moment the old member is removed);
// once node3's manifest says 3.6, healed by a 3.6 learner;
// (d) the cluster version is 3.6, HashKV equal, no failed write.
func TestRollingUpgrade35To36WithMemberLost(t *testing.T) {
	e35 := etcd35()
	bin36 := filepath.Join(binDir, "etcd")
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdBinary: e35.binary, AgentArgs: []string{upgradeGrace}})
	requireVersion(t, l, e35.version)
	wantClusterVersion(t, l, "3.5.", 30*time.Second)
	for _, n := range []string{"node1", "node2", "node3"} {
		waitAgentState(t, l, n, "healthy", "ok", 30*time.Second)
	}
	h := startHeal(t, l)

	// (a) node1 → 3.6: the member restarts on its data dir, keeps its ID.
	before := idsByPeer(mustMembers(t, l))
	upgradeMember(t, h, "node1", bin36, "3.6.")
	wantClusterVersion(t, l, "3.5.", 0)
	assertNoRecovery(t, l, "node1", "node1")
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
		t.Fatalf("(a) membership changed by an upgrade: before %v, now %v", before, now)
	}
	t.Logf("(a) node1 runs 3.6, cluster version still 3.5 (%s)", clusterVersion(t, l))

	// (b) node2, whose manifest says 3.5, wiped: healed in raft mode.
	wipeUnder(t, h, "node2")
	j := h.waitHealed("node2", "node2", 3, 2*time.Minute)
	t.Logf("(b) rejoin mode %q, seed fallback %q (%s)", j.RejoinMode, j.SeedFallback, j.SeedDetail)
	if j.RejoinMode != "raft" || j.SeedFallback != "seed-unsupported-version" {
		t.Fatalf("(b) journal: rejoin mode %q fallback %q (%s); want raft, seed-unsupported-version (the serving members mix 3.5 and 3.6)",
			j.RejoinMode, j.SeedFallback, j.SeedDetail)
	}
	if v := memberVersion(t, l, "node2"); !strings.HasPrefix(v, "3.5.") {
		t.Fatalf("(b) node2's new member runs etcd %s, want 3.5.x (its manifest's)", v)
	}
	wantClusterVersion(t, l, "3.5.", 0)

	// (c) node2 → 3.6; node3 (3.5 manifest) wiped: refused, nothing changed.
	upgradeMember(t, h, "node2", bin36, "3.6.")
	wantClusterVersion(t, l, "3.5.", 0) // node3 still runs 3.5
	before3 := mustMembers(t, l)
	wipeUnder(t, h, "node3")
	refusedAt := waitRefusedUnchanged(t, l, "node3", reasonLearnerBelowCluster, before3, 90*time.Second)
	t.Logf("(c) node3's agent refuses %s %s after the wipe; member list unchanged: %v",
		reasonLearnerBelowCluster, refusedAt.Sub(h.faultAt).Round(time.Millisecond), before3)
	// The operator upgrades node3's manifest too: a 3.6 learner may join.
	fixedAt := time.Now()
	if err := l.SetMemberVersion("node3", bin36); err != nil {
		t.Fatal(err)
	}
	j = h.waitHealed("node3", "node3", 3, 2*time.Minute)
	t.Logf("(c) node3 healed %s after its manifest said 3.6; rejoin mode %q, seed fallback %q (%s)",
		j.FinishedAt.Sub(fixedAt).Round(time.Millisecond), j.RejoinMode, j.SeedFallback, j.SeedDetail)
	if v := memberVersion(t, l, "node3"); !strings.HasPrefix(v, "3.6.") {
		t.Fatalf("(c) node3's new member runs etcd %s, want 3.6.x", v)
	}

	// (d) every member runs 3.6: the leader raises the cluster version.
	requireVersion(t, l, "3.6.")
	wantClusterVersion(t, l, "3.6.", 30*time.Second)
	// After the cluster version, each member raises its storage version.
	eventually(t, 30*time.Second, "every member's storage version 3.6", func() error {
		for _, n := range []string{"node1", "node2", "node3"} {
			if sv, err := storageVersion(l, n); err != nil || !strings.HasPrefix(sv, "3.6.") {
				return fmt.Errorf("%s: storage version %q (%v)", n, sv, err)
			}
		}
		return nil
	})
	t.Logf("(d) cluster version %s, storage version 3.6 on every member", clusterVersion(t, l))
	h.finish(invariantDefaults())
}

// TestUpgradedMemberLostHealsIntoOlderCluster: the second step's other
// case: {3.6, 3.5, 3.5} mid-upgrade, the 3.6 member lost: its manifest
// says 3.6, and a 3.6 learner may join a cluster whose version is 3.5
// (etcd refuses only a cluster version above the member's own). The
// cluster version stays 3.5.
func TestUpgradedMemberLostHealsIntoOlderCluster(t *testing.T) {
	e35 := etcd35()
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdBinary: e35.binary,
		EtcdBinaries: []string{filepath.Join(binDir, "etcd")}}) // node1: 3.6
	if v := memberVersion(t, l, "node1"); !strings.HasPrefix(v, "3.6.") {
		t.Fatalf("node1 runs etcd %s, want 3.6.x", v)
	}
	wantClusterVersion(t, l, "3.5.", 30*time.Second)
	h := startHeal(t, l)
	wipeUnder(t, h, "node1")
	j := h.waitHealed("node1", "node1", 3, 2*time.Minute)
	// Logged, not asserted: the wiped 3.6 member no longer serves when the
	// mode is chosen, so today the serving members look uniform (3.5) and
	// the 3.6 learner is seeded; whether a learner of another minor than
	// the members may be seeded is the version rule's call (plan step 5).
	t.Logf("rejoin mode %q, seed fallback %q (%s)", j.RejoinMode, j.SeedFallback, j.SeedDetail)
	if v := memberVersion(t, l, "node1"); !strings.HasPrefix(v, "3.6.") {
		t.Fatalf("node1's new member runs etcd %s, want 3.6.x (its manifest's)", v)
	}
	wantClusterVersion(t, l, "3.5.", 0)
	h.finish(invariantDefaults())
}

// upgradeMember points node's manifest at binary (the supervisor restarts
// the pod) and waits until the member serves on it, healthy in a healthy
// cluster. The member is moved off the leadership first: a leader's stop
// hands leadership off, which fails the proposals in flight (etcd's own
// disruption, not the agent's).
func upgradeMember(t *testing.T, h *healRun, node, binary, prefix string) {
	t.Helper()
	l := h.l
	h.steerOff(node)
	start := time.Now()
	if err := l.SetMemberVersion(node, binary); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, fmt.Sprintf("%s's member serves etcd %sx", node, prefix), func() error {
		v, err := memberVersionErr(l, node)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(v, prefix) {
			return fmt.Errorf("runs etcd %s", v)
		}
		return nil
	})
	if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitAgentState(t, l, node, "healthy", "ok", 30*time.Second)
	t.Logf("%s upgraded to %s in %s", node, memberVersion(t, l, node), time.Since(start).Round(time.Millisecond))
}

// wipeUnder wipes node's data dir while its etcd runs (moved off the
// leadership first), as the heal run's next fault.
func wipeUnder(t *testing.T, h *healRun, node string) {
	t.Helper()
	h.steerOff(node)
	h.fault()
	if err := h.l.WipeDataDir(node); err != nil {
		t.Fatal(err)
	}
}

// waitRefusedUnchanged waits until node's agent has refused with reason
// for a few seconds, and fails at once if it began a recovery instead
// (the refusal must come before any change) or the member list moved
// away from before. It returns when the refusal was first seen.
func waitRefusedUnchanged(t *testing.T, l *lab.Lab, node, reason string, before []member, d time.Duration) time.Time {
	t.Helper()
	var first time.Time
	const hold = 5 * time.Second // refused on several observations, not one
	eventually(t, d, fmt.Sprintf("%s's agent refuses %s for %s with the member list unchanged", node, reason, hold), func() error {
		if j, ok := loadJournal(t, l, node, node); ok {
			t.Fatalf("%s's agent began a recovery (journal %s: phase %s, result %s %s: %s) instead of refusing %s; member list now %v",
				node, j.ID, j.Phase, j.Result, j.Reason, j.Message, reason, membersOrErr(l))
		}
		now, err := memberList(context.Background(), l)
		if err != nil {
			return err
		}
		if !slices.EqualFunc(now, before, sameMember) {
			t.Fatalf("member list changed while %s's agent should refuse %s: before %v, now %v", node, reason, before, now)
		}
		refused, err := refusedFor(l, node, reason)
		if err != nil {
			s, _, _ := agentState(l, node)
			return fmt.Errorf("%v (agent state %s)", err, s)
		}
		if first.IsZero() {
			first = time.Now().Add(-refused)
		}
		if refused < hold {
			return fmt.Errorf("refused for %s", refused)
		}
		return nil
	})
	return first
}

func membersOrErr(l *lab.Lab) string {
	ms, err := memberList(context.Background(), l)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(ms)
}

// memberVersion is the etcd version node's member reports (Status).
func memberVersion(t *testing.T, l *lab.Lab, node string) string {
	t.Helper()
	var v string
	eventually(t, 30*time.Second, node+"'s member reports its version", func() (err error) {
		v, err = memberVersionErr(l, node)
		return err
	})
	return v
}

func memberVersionErr(l *lab.Lab, node string) (string, error) {
	st, err := memberStatus(l, node)
	if err != nil {
		return "", err
	}
	return st.Version, nil
}

// storageVersion is node's member's storage version (3.6+; "" on 3.5).
func storageVersion(l *lab.Lab, node string) (string, error) {
	st, err := memberStatus(l, node)
	if err != nil {
		return "", err
	}
	return st.StorageVersion, nil
}

func memberStatus(l *lab.Lab, node string) (*clientv3.StatusResponse, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return nil, err
	}
	cli, err := l.EtcdClientFor(n.ClientURL)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return cli.Status(ctx, n.ClientURL)
}

func clusterVersion(t *testing.T, l *lab.Lab) string {
	t.Helper()
	v, err := l.ClusterVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// wantClusterVersion waits up to d (0: asks once) for the cluster version
// to start with prefix.
func wantClusterVersion(t *testing.T, l *lab.Lab, prefix string, d time.Duration) {
	t.Helper()
	check := func() error {
		v, err := l.ClusterVersion(context.Background())
		if err != nil {
			return err
		}
		if !strings.HasPrefix(v, prefix) {
			return fmt.Errorf("cluster version %s", v)
		}
		return nil
	}
	if d == 0 {
		if err := check(); err != nil {
			t.Fatalf("want cluster version %sx: %v", prefix, err)
		}
		return
	}
	eventually(t, d, "cluster version "+prefix+"x", check)
}
