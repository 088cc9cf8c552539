package watchdog

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Routine polls (Run) of a healthy cluster ask only the local member and
// reuse the other members' last probe; a stopped peer is then seen at the
// next full probe (PeerProbeEvery, or any Observe: what the healer and the
// steward act on), and while any member does not serve every routine poll
// probes them all. A reused probe never makes a member look lost.
func TestRoutinePollsReuseThePeersProbeOnlyWhileEveryMemberServes(t *testing.T) {
	ctx := context.Background()
	l := threeMemberLab(t)
	n, peer := l.Spec.Nodes[0], l.Spec.Nodes[2]
	w, err := New(Config{Identity: Identity{Name: n.Member, PeerURLs: []string{n.PeerURL}, ClientURL: n.ClientURL, DataDir: n.DataDir},
		Endpoints: l.Spec.ClientURLs(), PollInterval: time.Hour, ProbeTimeout: 3 * time.Second, GracePeriod: time.Minute, PeerProbeEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
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
	// The local member is in a new term: the first routine poll probes
	// every member again, and names the new leader.
	if o = w.observeTimed(ctx, time.Now(), true); o.LeaderID != next || o.PeersReused {
		t.Fatalf("the first routine poll after the leader moved to %x names leader %x (reused probe: %v)", next, o.LeaderID, o.PeersReused)
	}
	if err := l.StopMember(peer.Name); err != nil {
		t.Fatal(err)
	}
	if o = w.observeTimed(ctx, time.Now(), true); !serving(o, peer.Member) {
		t.Fatalf("a routine poll within PeerProbeEvery probed %s again (want its last probe reused)", peer.Member)
	}
	if o.LeaderID == 0 || o.MemberListError != "" || o.Local.Match != observation.MatchOK || !o.Local.Serving {
		t.Fatalf("a routine poll from the last probe must read as that healthy cluster: leader %x, list error %q, local %+v", o.LeaderID, o.MemberListError, o.Local)
	}
	if o = w.Observe(ctx, time.Now()); serving(o, peer.Member) {
		t.Fatalf("a full observation says the stopped %s serves", peer.Member)
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
