package watchdog

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// oneMember is a real one-member etcd cluster from bin/.
type oneMember struct {
	clientURL           string
	memberID, clusterID uint64
	stop                func()
}

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// startOneMember starts member name of a new cluster (its own token, so its
// own cluster ID) and waits until it serves.
func startOneMember(t *testing.T, name string) oneMember {
	t.Helper()
	return startOneMemberOf(t, name, "etcd")
}

// startOneMemberOf is startOneMember with bin/<binary> ("etcd-3.5").
func startOneMemberOf(t *testing.T, name, binary string) oneMember {
	t.Helper()
	bin, _ := filepath.Abs("../../bin/" + binary)
	dir := t.TempDir()
	client, peer := freeURL(t), freeURL(t)
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--name", name, "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", name+"="+peer, "--initial-cluster-token", fmt.Sprintf("%s-%d", name, time.Now().UnixNano()),
		"--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(stop)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, client)
		cancel()
		if err == nil && st.Leader != 0 {
			return oneMember{clientURL: client, memberID: st.Header.MemberId, clusterID: st.Header.ClusterId, stop: stop}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not serving after 30s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestForeignClusterAnswersAreIgnored: a second cluster answers first among
// the endpoints (a stale or recycled IP, a typo in --endpoints). With the
// pin, the observation is of our cluster and counts the foreign endpoint;
// with only the foreign cluster reachable, the plan refuses foreign-cluster.
// Without a pin, the first cluster adopted is kept, never swapped silently.
func TestForeignClusterAnswersAreIgnored(t *testing.T) {
	ours, foreign := startOneMember(t, "a"), startOneMember(t, "z")
	if ours.clusterID == foreign.clusterID {
		t.Fatal("the two clusters share a cluster ID")
	}
	newWatchdog := func(clientURL string, pin func() uint64, eps ...string) *Watchdog {
		// Our member b is not (or no longer) listed and its etcd is down.
		w, err := New(Config{Identity: Identity{Name: "b", PeerURLs: []string{"http://127.0.0.1:1"}, ClientURL: clientURL,
			DataDir: t.TempDir()}, Endpoints: eps, PinnedClusterID: pin, ProbeTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		return w
	}
	ctx := context.Background()
	pinned := func() uint64 { return ours.clusterID }
	down := freeURL(t)
	wp := newWatchdog(down, pinned, foreign.clientURL, ours.clientURL)
	wa := newWatchdog(down, nil, ours.clientURL, foreign.clientURL)
	// A foreign process answers at our own client URL.
	wl := newWatchdog(foreign.clientURL, pinned, ours.clientURL)

	o := wp.Observe(ctx, time.Now())
	if o.ClusterID != ours.clusterID || o.PinnedClusterID != ours.clusterID || o.LeaderID != ours.memberID ||
		len(o.Members) != 1 || o.Members[0].Name != "a" {
		t.Fatalf("pinned: cluster %x pin %x leader %x members %v, want cluster %x with member a (%x)",
			o.ClusterID, o.PinnedClusterID, o.LeaderID, o.Members, ours.clusterID, ours.memberID)
	}
	if !slices.Equal(o.ForeignEndpoints, []string{foreign.clientURL}) {
		t.Fatalf("pinned: foreign endpoints %v, want %s", o.ForeignEndpoints, foreign.clientURL)
	}
	if o := wa.Observe(ctx, time.Now()); o.ClusterID != ours.clusterID || o.PinnedClusterID != ours.clusterID {
		t.Fatalf("adopting: cluster %x pin %x, want %x", o.ClusterID, o.PinnedClusterID, ours.clusterID)
	}
	o = wl.Observe(ctx, time.Now())
	if o.Local.AnsweringClusterID != foreign.clusterID || o.Local.Match != observation.MatchAmbiguous || o.Local.Serving ||
		!slices.Contains(o.ForeignEndpoints, foreign.clientURL) {
		t.Fatalf("foreign at our client URL: answering cluster %x, match %s (%s), serving %v, foreign %v",
			o.Local.AnsweringClusterID, o.Local.Match, o.Local.MatchDetail, o.Local.Serving, o.ForeignEndpoints)
	}

	ours.stop()
	for name, w := range map[string]*Watchdog{"pinned": wp, "adopted": wa} {
		o := w.Observe(ctx, time.Now())
		t.Logf("%s, only the foreign cluster up: list error %q, foreign %v", name, o.MemberListError, o.ForeignEndpoints)
		if o.ClusterID != ours.clusterID || o.MemberListError == "" || !slices.Contains(o.ForeignEndpoints, foreign.clientURL) {
			t.Fatalf("%s: cluster %x, list error %q, members %v, foreign %v: the foreign cluster's answers were used",
				name, o.ClusterID, o.MemberListError, o.Members, o.ForeignEndpoints)
		}
		in := plan.Input{Now: o.At, Obs: o, Verdict: memberstate.Verdict{State: memberstate.Lost},
			Request: &plan.Request{Action: "rejoin"}, APIAvailable: true, FreeBytes: 1 << 40}
		if d := plan.Decide(in, plan.Config{AutoHeal: true}); d.Action != plan.Refuse || d.Reason != plan.ReasonForeignCluster {
			t.Fatalf("%s: decision %s/%s (%s), want refuse/foreign-cluster", name, d.Action, d.Reason, d.Detail)
		}
	}
}
