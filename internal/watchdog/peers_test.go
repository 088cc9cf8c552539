package watchdog

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
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
		Endpoints: l.Spec.ClientURLs(), PollInterval: time.Second, GracePeriod: time.Minute, PeerProbeEvery: time.Hour})
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
	if err := l.StopMember(peer.Name); err != nil {
		t.Fatal(err)
	}
	if o = w.observeTimed(ctx, time.Now(), true); !serving(o, peer.Member) {
		t.Fatalf("a routine poll within PeerProbeEvery probed %s again (want its last probe reused)", peer.Member)
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
