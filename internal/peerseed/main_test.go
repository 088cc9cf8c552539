package peerseed

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// One real 3-member lab serves every test and benchmark of this package that
// needs one. It is started on first use (pure tests do not pay for it) and
// stopped by TestMain.
var (
	labOnce   sync.Once
	sharedLab *lab.Lab
	labErr    error
	labTmp    string
	labFailed bool
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedLab != nil {
		if err := sharedLab.Down(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "peerseed: lab down:", err)
			code = 1
		}
	}
	if labTmp != "" {
		if code == 0 && !labFailed {
			os.RemoveAll(labTmp)
		} else {
			fmt.Fprintln(os.Stderr, "peerseed: lab folder kept for inspection in", labTmp)
		}
	}
	os.Exit(code)
}

// realLab returns the package's lab, bringing it up on first use.
func realLab(t testing.TB) *lab.Lab {
	t.Helper()
	labOnce.Do(func() { sharedLab, labErr = upLab() })
	if labErr != nil {
		t.Fatalf("lab: %v", labErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			labFailed = true
		}
	})
	return sharedLab
}

func upLab() (*lab.Lab, error) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	binDir := filepath.Join(repo, "bin")
	if _, err := os.Stat(filepath.Join(binDir, "etcd")); err != nil {
		return nil, fmt.Errorf("%s missing: run make tools", filepath.Join(binDir, "etcd"))
	}
	if labTmp, err = os.MkdirTemp("", "peerseed-lab-"); err != nil {
		return nil, err
	}
	// The lab's supervisors are `etcd-agent lab supervise`: build it fresh.
	agent := filepath.Join(labTmp, "etcd-agent")
	build := exec.Command("go", "build", "-o", agent, "./cmd/etcd-agent")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build etcd-agent: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, lab.Options{Dir: filepath.Join(labTmp, "lab"), Nodes: 3, BinDir: binDir,
		AgentBinary: agent, NoAPIServer: true, Log: zap.NewNop()})
	if err != nil && l != nil {
		sharedLab = l // so that TestMain stops what did start
	}
	return l, err
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
