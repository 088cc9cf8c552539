package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// The heal scenarios whose outcome depends on etcd's data dir format or
// version, run on every etcd minor the agent supports: 3.6 is the suite's
// default (the scenario's own test), the tests here add a row per other
// minor (bin/etcd-3.5 and bin/etcd-3.7 from `make tools`).

// etcdUnderTest is the etcd a lab's members run: binary ("" for bin/etcd)
// and the version prefix every member must report.
type etcdUnderTest struct{ binary, version string }

// row is the subtest name of e: "etcd3.6".
func (e etcdUnderTest) row() string { return "etcd" + strings.TrimSuffix(e.version, ".") }

var etcd36 = etcdUnderTest{version: "3.6."}

// entriesToCompactPast is how many entries past an early index (a new lab's
// seed, a few hundred) the lab's leader must apply until its raft log no
// longer holds that index, so a learner that far behind needs a raft
// snapshot. 3.6 and 3.7 compact every 100 applied entries, keeping 5,000.
// 3.5 compacts only when it snapshots (server.go triggerSnapshot), after
// --snapshot-count (10,000 in the lab) applied entries, also keeping 5,000:
// its first snapshot, past index 10,000, compacts to past 5,000.
func (e etcdUnderTest) entriesToCompactPast() int {
	if e.version == "3.5." {
		return 10500
	}
	return 6500
}

// etcd37 is bin/etcd-3.7 (binDir is set in TestMain).
func etcd37() etcdUnderTest { return etcdUnderTest{filepath.Join(binDir, "etcd-3.7"), "3.7."} }

// etcd35 is bin/etcd-3.5, the etcd most clusters still run (Kubernetes
// up to 1.33, OpenShift up to 4.19). A 3.5 learner refuses writes with
// codes.Unavailable (3.6: FailedPrecondition, etcd PR 12985), which etcd
// clients since 3.6, the API server's included, do not retry on another
// endpoint: a write that reaches the learner between its first serving and
// its promotion fails, and a 3.5 row's checker counts it.
func etcd35() etcdUnderTest { return etcdUnderTest{filepath.Join(binDir, "etcd-3.5"), "3.5."} }

// onVersions runs scenario once per etcd of es, a subtest each.
func onVersions(t *testing.T, scenario func(*testing.T, etcdUnderTest), es ...etcdUnderTest) {
	for _, e := range es {
		t.Run(e.row(), func(t *testing.T) { scenario(t, e) })
	}
}

// requireVersion fails unless every member of l runs etcd prefix*.
func requireVersion(t *testing.T, l *lab.Lab, prefix string) {
	t.Helper()
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, ep := range l.Spec.ClientURLs() {
		st, err := cli.Status(context.Background(), ep)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(st.Version, prefix) {
			t.Fatalf("member at %s runs etcd %s, want %s*", ep, st.Version, prefix)
		}
	}
}

// TestHealSeededOnEtcdVersions: the wipe scenario of
// TestHealWipedDataDirSeedMode: seeded, no raft snapshot sent, HashKV
// equal, no failed write. On 3.5, which reads membership and the cluster
// version from the v2 store in the .snap, the learner must also have
// started from the seed's .snap and never applied a leader's snapshot.
func TestHealSeededOnEtcdVersions(t *testing.T) {
	onVersions(t, func(t *testing.T, e etcdUnderTest) {
		l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdBinary: e.binary})
		requireVersion(t, l, e.version)
		h, j := seededWipeHeal(t, l)
		if e.version == etcd35().version {
			assertV2StoreFromSeed(t, l, "node2", h.faultAt, j.SeedIndex, false)
			assertClientURLsSetAsideAndBack(t, l, "node2", j)
		}
		assertQuarantine(t, l, "node2", j)
		h.finish(invariantDefaults())
	}, etcd35(), etcd37())
}

// TestSeedModeLearnerStartedAfterTheLeaderCompactedGetsASnapshotOnEtcdVersions:
// the compacted-log scenario; raft snapshot handling differs by minor (3.7
// drops the v2 store, 3.5 rebuilds membership from it): the leader's
// snapshot still replaces the seed cleanly.
func TestSeedModeLearnerStartedAfterTheLeaderCompactedGetsASnapshotOnEtcdVersions(t *testing.T) {
	onVersions(t, func(t *testing.T, e etcdUnderTest) {
		l, h := seedThenCompactedLeaderSendsSnapshot(t, e)
		if e.version == etcd35().version {
			// The learner started from the seed, then took the leader's snapshot.
			assertV2StoreFromSeed(t, l, "node2", h.faultAt, seededAt(t, l, "node2"), true)
		}
		h.finish(invariantDefaults())
	}, etcd35(), etcd37())
}

// TestHealWipedDataDirOfRunningMemberOnEtcdVersions: the raft-mode wipe of
// a running member (remove, empty learner, raft snapshot, promote).
func TestHealWipedDataDirOfRunningMemberOnEtcdVersions(t *testing.T) {
	onVersions(t, healWipedDataDirOfRunningMember, etcd35())
}

// TestWipedMemberKilledInsideGraceNeverRestartsUnderItsOldIDOnEtcdVersions:
// the start gate holds a member restarted on an empty data dir.
func TestWipedMemberKilledInsideGraceNeverRestartsUnderItsOldIDOnEtcdVersions(t *testing.T) {
	onVersions(t, wipedMemberKilledInsideGrace, etcd35())
}

// assertV2StoreFromSeed checks node's etcd log since from: etcd 3.5 logged
// that it rebuilt its v2 store (membership, cluster version) from the
// seed's .snap at index seed, and applied a leader's raft snapshot only if
// snapshot.
func assertV2StoreFromSeed(t *testing.T, l *lab.Lab, node string, from time.Time, seed uint64, snapshot bool) {
	t.Helper()
	path := filepath.Join(nodeOf(t, l, node).LogsDir, "etcd-"+node+"_etcd.log")
	since := func(msg string) []map[string]any {
		var out []map[string]any
		for _, e := range logEntries(t, path, msg) {
			if at, ok := etcdLogTime(e); ok && !at.Before(from) {
				out = append(out, e)
			}
		}
		return out
	}
	var idx []any
	found := false
	for _, e := range since("recovered v2 store from snapshot") {
		idx = append(idx, e["snapshot-index"])
		found = found || e["snapshot-index"] == float64(seed)
	}
	if !found {
		t.Fatalf("%s's etcd logged \"recovered v2 store from snapshot\" since the fault at indexes %v, want the seed's %d", node, idx, seed)
	}
	t.Logf("%s: recovered v2 store from snapshot at %v (seed %d)", node, idx, seed)
	if applied := since("applying snapshot"); snapshot != (len(applied) > 0) {
		t.Fatalf("%s's etcd logged \"applying snapshot\" %d times since the fault, want a leader's snapshot: %v", node, len(applied), snapshot)
	}
}

// assertClientURLsSetAsideAndBack: node's 3.5 learner listened on a
// private client URL until its promotion, then was restarted on its own
// (issue 40): its journal names both, and the member list gives it its
// own client URL alone.
func assertClientURLsSetAsideAndBack(t *testing.T, l *lab.Lab, node string, j journal.Record) {
	t.Helper()
	n := nodeOf(t, l, node)
	if j.ClientURLsAside == "" || j.ClientURLsAside == n.ClientURL || j.ClientURLsRestoredAt.IsZero() {
		t.Fatalf("%s's journal: client URLs aside %q, restored at %v: want a private URL, then restored", node, j.ClientURLsAside, j.ClientURLsRestoredAt)
	}
	eventually(t, 30*time.Second, node+" advertises its own client URL alone", func() error {
		for _, m := range mustMembers(t, l) {
			if m.Name == n.Member && (len(m.Clients) != 1 || m.Clients[0] != n.ClientURL) {
				return fmt.Errorf("%s advertises %v", m.Name, m.Clients)
			}
		}
		return nil
	})
	t.Logf("%s: learner on %s until its promotion, restarted on %s at %s", node, j.ClientURLsAside, n.ClientURL, j.ClientURLsRestoredAt.Format("15:04:05.000"))
}
