package watchdog

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Routine polls (Run) of a healthy cluster reuse the last full probe
// while every member's liveness stream stays open. A leadership move
// keeps every member with a leader, so it shows at the next full probe
// (reported only: the healer and the steward act on full observations);
// a peer that stops ends its stream, and the next routine poll probes
// every member, as every poll does until all serve again.
func TestRoutinePollsReuseTheLastProbeOnlyWhileEveryMemberIsLive(t *testing.T) {
	ctx := context.Background()
	l := threeMemberLab(t)
	n, peer := l.Spec.Nodes[0], l.Spec.Nodes[2]
	w, err := New(Config{Identity: Identity{Name: n.Member, PeerURLs: []string{n.PeerURL}, ClientURL: n.ClientURL, DataDir: n.DataDir},
		Endpoints: l.Spec.ClientURLs(), PollInterval: time.Hour, ProbeTimeout: 3 * time.Second, GracePeriod: time.Minute, PeerProbeEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.running.Store(true) // the routine polls below are Run's
	serving := func(o observation.Observation, name string) bool {
		for _, m := range o.Members {
			if m.Name == name {
				return m.Serving
			}
		}
		t.Fatalf("%s not listed: %+v", name, o.Members)
		return false
	}
	var o observation.Observation
	for deadline := time.Now().Add(30 * time.Second); ; {
		if o = w.observeTimed(ctx, time.Now(), true); o.ServingVoters() == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not healthy: %+v", o.Members)
		}
	}
	// Leadership moves between full probes: a routine poll names the
	// leader the local member knows now (stale flags would read as two
	// leaders or none: a lost quorum).
	// (to a member that is not the peer stopped below: its loss would
	// cost an election, which makes every poll a full one)
	leader := o.LeaderID
	var next uint64
	for _, name := range []string{l.Spec.Nodes[1].Member, n.Member} {
		for _, m := range o.Members {
			if m.Name == name && m.ID != leader && next == 0 {
				next = m.ID
			}
		}
	}
	var leaderURL string
	for _, m := range o.Members {
		if m.ID == leader {
			leaderURL = m.ClientURLs[0]
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{leaderURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = cli.MoveLeader(mctx, next)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	// Every member keeps a leader through the move: the routine poll
	// reuses the probe, naming the leader it saw; a full observation names
	// the new one, and the routine polls after it do.
	if o = w.observeTimed(ctx, time.Now(), true); !o.PeersReused || o.LeaderID != leader {
		t.Fatalf("the first routine poll after the leader moved: reused %v, leader %x; want the probe reused, naming %x", o.PeersReused, o.LeaderID, leader)
	}
	if o = w.Observe(ctx, time.Now()); o.LeaderID != next {
		t.Fatalf("a full observation after the leader moved to %x names %x", next, o.LeaderID)
	}
	if o = w.observeTimed(ctx, time.Now(), true); !o.PeersReused || o.LeaderID != next {
		t.Fatalf("a routine poll after that full observation: reused %v, leader %x; want %x", o.PeersReused, o.LeaderID, next)
	}
	for len(w.live.ended) > 0 {
		<-w.live.ended
	}
	if err := l.StopMember(peer.Name); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, w, 10*time.Second, "peer stopped")
	if o = w.observeTimed(ctx, time.Now(), true); o.PeersReused || serving(o, peer.Member) {
		t.Fatalf("a routine poll after %s stopped: reused %v, it serves %v; want a full probe that sees it down", peer.Member, o.PeersReused, serving(o, peer.Member))
	}
	if o.LeaderID == 0 || o.MemberListError != "" || o.Local.Match != observation.MatchOK || !o.Local.Serving {
		t.Fatalf("the cluster keeps its quorum: leader %x, list error %q, local %+v", o.LeaderID, o.MemberListError, o.Local)
	}
	// The last full probe saw a member not serving: routine polls probe
	// everyone until all serve again.
	for range 2 {
		if o = w.observeTimed(ctx, time.Now(), true); serving(o, peer.Member) {
			t.Fatalf("a routine poll reused a probe with %s down", peer.Member)
		}
	}
	if err := l.StartMember(peer.Name); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !serving(w.observeTimed(ctx, time.Now(), true), peer.Member); {
		if time.Now().After(deadline) {
			t.Fatalf("%s restarted but routine polls never saw it serve", peer.Member)
		}
	}
}
