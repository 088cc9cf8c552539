package peerseed

import (
	"context"
	"fmt"
	"io"
	"strconv"
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

func TestMain(m *testing.M) { shared.Main(m) }

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
