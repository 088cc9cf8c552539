package memberruntime

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// One real 3-member lab serves every test (and benchmark) of this package
// that needs one, started on first use: tests that need none do not pay.
var shared = labtest.NewShared("memberruntime", lab.Options{Nodes: 3, NoAPIServer: true})

func TestMain(m *testing.M) { shared.Main(m) }

// realLab returns the package's lab, bringing it up on first use.
func realLab(t testing.TB) *lab.Lab {
	t.Helper()
	return shared.Lab(t)
}

// waitServing polls the member's own Status until it answers without errors.
func waitServing(t *testing.T, clientURL string, d time.Duration) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, clientURL)
		cancel()
		if err == nil && len(st.Errors) == 0 && st.Leader != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not serving after %s: status %v, err %v", clientURL, d, st, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mustRefuse(t *testing.T, clientURL string) {
	t.Helper()
	refused, err := clientURLRefuses(clientURL)
	if err != nil || !refused {
		t.Fatalf("%s should refuse connections: refused=%v err=%v", clientURL, refused, err)
	}
}

// reversedInitialCluster is a valid --initial-cluster for the lab that
// differs from the one its manifests were written with.
func reversedInitialCluster(l *lab.Lab) string {
	var parts []string
	for i := len(l.Spec.Nodes) - 1; i >= 0; i-- {
		n := l.Spec.Nodes[i]
		parts = append(parts, n.Member+"="+n.PeerURL)
	}
	return strings.Join(parts, ",")
}

func TestStaticPodStopsAndStartsARealMember(t *testing.T) {
	l := realLab(t)
	n := l.Spec.Nodes[1]
	rt := NewStaticPod(n.EtcdManifest(), filepath.Join(n.StateDir, "parked"), []string{n.ClientURL, n.PeerURL}, zaptest.NewLogger(t))
	t.Log(rt.Describe())

	begin := time.Now()
	if err := rt.Stop(ctxWithTimeout(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %s", time.Since(begin))
	mustRefuse(t, n.ClientURL)
	if locked, err := dbLocked(filepath.Join(n.DataDir, dbRelPath)); err != nil || locked {
		t.Fatalf("db still locked after Stop: %v %v", locked, err)
	}
	mustNotExist(t, n.EtcdManifest())
	mustStopped(t, rt, true)

	begin = time.Now()
	if err := rt.Stop(ctxWithTimeout(t, time.Minute)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	t.Logf("second Stop took %s", time.Since(begin))

	ic := reversedInitialCluster(l)
	begin = time.Now()
	if err := rt.Start(ctxWithTimeout(t, time.Minute), ic); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.LoadMember(n.EtcdManifest())
	if err != nil {
		t.Fatal(err)
	}
	if m.InitialCluster != ic || m.InitialClusterState != "existing" {
		t.Fatalf("manifest has initial-cluster %q state %q, want %q existing", m.InitialCluster, m.InitialClusterState, ic)
	}
	mustStopped(t, rt, false)
	onlyManifest(t, n.ManifestsDir)
	// The data dir exists, so etcd restarts from it and ignores the flags.
	waitServing(t, n.ClientURL, time.Minute)
	t.Logf("Start until serving took %s", time.Since(begin))

	ino := inode(t, n.EtcdManifest())
	if err := rt.Start(ctxWithTimeout(t, time.Minute), ic); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if inode(t, n.EtcdManifest()) != ino {
		t.Fatal("second Start replaced the manifest: the kubelet would restart etcd for nothing")
	}
	if err := l.WaitHealthy(context.Background(), 3, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func TestExecStopsARealMemberAndWaitsUntilItsProcessIsGone(t *testing.T) {
	l := realLab(t)
	n := l.Spec.Nodes[2]
	aside := filepath.Join(n.NodeDir, "etcd.yaml.exec-stopped")
	rt := NewExec(fmt.Sprintf("mv %q %q", n.EtcdManifest(), aside), fmt.Sprintf("mv %q %q", aside, n.EtcdManifest()),
		[]string{n.ClientURL, n.PeerURL}, n.DataDir, zaptest.NewLogger(t))
	mustStopped(t, rt, false)

	begin := time.Now()
	if err := rt.Stop(ctxWithTimeout(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %s", time.Since(begin))
	mustRefuse(t, n.ClientURL)
	mustStopped(t, rt, true)

	if err := rt.Start(ctxWithTimeout(t, time.Minute), reversedInitialCluster(l)); err != nil {
		t.Fatal(err)
	}
	waitServing(t, n.ClientURL, time.Minute)
	if err := l.WaitHealthy(context.Background(), 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	mustStopped(t, rt, false)
}
