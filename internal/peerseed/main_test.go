package peerseed

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// One real 3-member lab serves every test (and benchmark) of this package
// that needs one, started on first use: tests that need none do not pay.
var shared = labtest.NewShared("peerseed", lab.Options{Nodes: 3, NoAPIServer: true})

// shared35 is the same lab on bin/etcd-3.5, for the tests that start a
// seeded etcd (issue 40): started only when one of them runs; a missing
// binary fails them.
var shared35 = labtest.NewShared("peerseed-3.5", lab.Options{Nodes: 3, NoAPIServer: true, EtcdBinary: "etcd-3.5"})

func TestMain(m *testing.M) { labtest.MainAll(m, shared, shared35) }

// seedEtcd is one etcd the tests that start a seeded learner run on.
type seedEtcd struct {
	name    string // subtest name: the binary in bin/
	lab     *labtest.Shared
	version string // what its members report, e.g. "3.5."
	// corruptCheck turns on the initial corruption check at start (3.5
	// has no --feature-gates).
	corruptCheck string
	// v2 etcd takes its membership and cluster version from the .snap's
	// v2 store (3.5), not from the db.
	v2 bool
}

var seedEtcds = []seedEtcd{
	{name: "etcd", lab: shared, version: "3.6.", corruptCheck: "--feature-gates=InitialCorruptCheck=true"},
	{name: "etcd-3.5", lab: shared35, version: "3.5.", corruptCheck: "--experimental-initial-corrupt-check=true", v2: true},
}

// up brings e's lab up and checks that its members run e's version.
func (e seedEtcd) up(t *testing.T) *lab.Lab {
	t.Helper()
	l := e.lab.Lab(t)
	cli := labClient(t, l)
	st, err := cli.Status(ctxWithTimeout(t, 5*time.Second), l.Spec.Nodes[0].ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.Version, e.version) {
		t.Fatalf("the %s lab runs etcd %s, want %sx", e.name, st.Version, e.version)
	}
	return l
}

// etcdPath is the etcd binary l's members run.
func etcdPath(l *lab.Lab) string {
	if l.Spec.EtcdBinary != "" {
		return l.Spec.EtcdBinary
	}
	return filepath.Join(l.Spec.BinDir, "etcd")
}

// realLab returns the package's lab, bringing it up on first use.
func realLab(t testing.TB) *lab.Lab {
	t.Helper()
	return shared.Lab(t)
}

// observe turns the lab's status into the observation the agent would
// have, for PickSource.
func observe(t testing.TB, l *lab.Lab) observation.Observation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := l.Status(ctx)
	if st.MemberList != "" {
		t.Fatalf("lab member list: %s", st.MemberList)
	}
	var obs observation.Observation
	for _, ms := range st.Members {
		id, err := strconv.ParseUint(ms.ID, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		m := observation.Member{ID: id, Name: ms.Name, PeerURLs: []string{ms.PeerURL}, IsLearner: ms.Learner,
			Serving: ms.Healthy, IsLeader: ms.Leader, AppliedIndex: ms.AppliedIndex, DBSize: ms.DBSize}
		if ms.ClientURL != "" {
			m.ClientURLs = []string{ms.ClientURL}
		}
		if ms.Leader {
			obs.LeaderID = id
		}
		obs.Members = append(obs.Members, m)
	}
	return obs
}

// putKeys writes n keys of valueSize bytes under prefix.
func putKeys(t testing.TB, l *lab.Lab, prefix string, n, valueSize int) {
	t.Helper()
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	val := make([]byte, valueSize)
	for i := range val {
		val[i] = byte('a' + i%26)
	}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("%s/%06d", prefix, i), string(val))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// rawSnapshot reads a whole snapshot stream (db + sha256) into memory, to
// feed streamToFile altered copies of a real stream.
func rawSnapshot(t testing.TB, endpoint string) []byte {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Snapshot.Close()
	raw, err := io.ReadAll(resp.Snapshot)
	if err != nil {
		t.Fatalf("read snapshot: %v", err)
	}
	return raw
}
