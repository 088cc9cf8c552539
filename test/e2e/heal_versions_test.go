package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// Seed mode writes the data dir layout of one etcd minor version; the
// agent seeds only the minors these scenarios prove (3.6 everywhere else in
// the suite, 3.7 here, with bin/etcd-3.7 from `make tools`).

// etcdUnderTest is the etcd a lab's members run: binary ("" for bin/etcd)
// and the version prefix every member must report.
type etcdUnderTest struct{ binary, version string }

var etcd36 = etcdUnderTest{version: "3.6."}

// etcd37 is bin/etcd-3.7 (binDir is set in TestMain).
func etcd37() etcdUnderTest { return etcdUnderTest{filepath.Join(binDir, "etcd-3.7"), "3.7."} }

// etcd35 is bin/etcd-3.5, the etcd most clusters still run (Kubernetes
// up to 1.33, OpenShift up to 4.19).
func etcd35() etcdUnderTest { return etcdUnderTest{filepath.Join(binDir, "etcd-3.5"), "3.5."} }

// TestHealSeededOnEtcd35 (experiment)
func TestHealSeededOnEtcd35(t *testing.T) {
	e := etcd35()
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdBinary: e.binary})
	requireVersion(t, l, e.version)
	h, j := seededWipeHeal(t, l)
	assertQuarantine(t, l, "node2", j)
	h.finish(invariantDefaults())
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

// TestHealSeededOnEtcd37: the wipe scenario of TestHealWipedDataDirSeedMode
// on an etcd 3.7 cluster: seeded, no raft snapshot sent, HashKV equal, no
// failed write.
func TestHealSeededOnEtcd37(t *testing.T) {
	e := etcd37()
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdBinary: e.binary})
	requireVersion(t, l, e.version)
	h, j := seededWipeHeal(t, l)
	assertQuarantine(t, l, "node2", j)
	h.finish(invariantDefaults())
}

// TestSeedModeLearnerStartedAfterTheLeaderCompactedGetsASnapshotOnEtcd37:
// the compacted-log scenario on etcd 3.7, whose raft snapshot handling
// changed (3.7 drops the v2 store): the leader's snapshot still replaces
// the seed cleanly.
func TestSeedModeLearnerStartedAfterTheLeaderCompactedGetsASnapshotOnEtcd37(t *testing.T) {
	seedThenCompactedLeaderSendsSnapshot(t, etcd37())
}
