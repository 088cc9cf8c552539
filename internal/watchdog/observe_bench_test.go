package watchdog

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// BenchmarkObserve measures one observation of a healthy 3-member cluster,
// side by side: "full" (member list, Status + linearizable read per member,
// data dir layout: what Observe and every peer probe cost) and "routine"
// (a poll within --peer-probe-interval of a healthy full probe while every
// member's liveness stream is open: no request, the data dir's stats). It
// runs the real lab from bin/ (`make
// tools build` first).
func BenchmarkObserve(b *testing.B) {
	ctx := context.Background()
	l := threeMemberLab(b)
	n := l.Spec.Nodes[1]
	w, err := New(Config{Identity: Identity{Name: n.Member, PeerURLs: []string{n.PeerURL}, ClientURL: n.ClientURL, DataDir: n.DataDir},
		Endpoints: l.Spec.ClientURLs(), PollInterval: time.Second, GracePeriod: time.Minute, PeerProbeEvery: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if r := assess(w).Observe(ctx, time.Now()); r.Verdict.State != "healthy" {
		b.Fatalf("cluster not healthy: %s %s", r.Verdict.State, r.Verdict.Detail)
	}
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			w.Observe(ctx, time.Now())
		}
	})
	w.running.Store(true) // the routine polls below are Run's
	b.Run("routine", func(b *testing.B) {
		at := time.Now()
		if o := w.observeTimed(ctx, at, false); o.ServingVoters() != 3 {
			b.Fatalf("cluster not healthy: %+v", o.Members)
		}
		for b.Loop() {
			if o := w.observeTimed(ctx, at, true); !o.PeersReused {
				b.Fatal("a routine poll of the healthy cluster did not reuse the probe")
			}
		}
	})
}

// threeMemberLab is a 3-member etcd lab from bin/ (no API server), taken
// down when the test ends.
func threeMemberLab(t testing.TB) *lab.Lab {
	t.Helper()
	bin, _ := filepath.Abs("../../bin")
	for _, f := range []string{"etcd", "etcd-agent"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			t.Fatalf("%s missing: run `make tools build`", filepath.Join(bin, f))
		}
	}
	l, err := lab.Up(context.Background(), lab.Options{Dir: t.TempDir(), Nodes: 3, BinDir: bin,
		AgentBinary: filepath.Join(bin, "etcd-agent"), NoAPIServer: true})
	if l != nil {
		t.Cleanup(func() { _ = l.Down(context.Background()) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}
