package watchdog

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// requestLog records every gRPC request the watchdog's clients send.
type requestLog struct {
	mu   sync.Mutex
	sent []string // "<target> <method>"
}

func (r *requestLog) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r.mu.Lock()
	r.sent = append(r.sent, cc.Target()+" "+method)
	r.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (r *requestLog) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sent
	r.sent = nil
	return out
}

// fullProbe: every member of a 3-member cluster was asked its Status and
// a linearizable read.
func fullProbe(sent []string) bool {
	return countMethod(sent, "/etcdserverpb.Maintenance/Status") == 3 && countMethod(sent, "/etcdserverpb.KV/Range") == 3
}

func countMethod(sent []string, method string) int {
	n := 0
	for _, s := range sent {
		if strings.HasSuffix(s, " "+method) {
			n++
		}
	}
	return n
}

// A routine poll of a healthy cluster is one request: a linearizable
// member list through the local member, which only a leader with a quorum
// answers. It stays one request until the reused probe is
// --peer-probe-interval old; a new member (a learner) or an alarm makes
// every poll a full probe. A full probe asks for alarms only when a
// member's Status lists any.
func TestARoutinePollOfAHealthyClusterIsOneMemberListThroughTheLocalMember(t *testing.T) {
	ctx := context.Background()
	l := threeMemberLab(t)
	n := l.Spec.Nodes[0]
	const every = 30 * time.Second
	w, err := New(Config{Identity: Identity{Name: n.Member, PeerURLs: []string{n.PeerURL}, ClientURL: n.ClientURL, DataDir: n.DataDir},
		Endpoints: l.Spec.ClientURLs(), PollInterval: time.Hour, ProbeTimeout: 3 * time.Second, GracePeriod: time.Minute, PeerProbeEvery: every})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var log requestLog
	w.clients.dialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(log.interceptor)}
	local, err := url.Parse(n.ClientURL)
	if err != nil {
		t.Fatal(err)
	}

	// A full probe of the healthy cluster, at t0.
	var o observation.Observation
	var t0 time.Time
	for deadline := time.Now().Add(30 * time.Second); ; {
		t0 = time.Now()
		if o = w.observeTimed(ctx, t0, true); o.ServingVoters() == 3 && o.LeaderID != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not healthy: %+v", o.Members)
		}
	}
	if got := countMethod(log.take(), "/etcdserverpb.Maintenance/Alarm"); got != 0 {
		t.Fatalf("a full probe of a cluster without alarms asked for alarms %d times", got)
	}

	sent := func(at time.Time) (observation.Observation, []string) {
		o := w.observeTimed(ctx, at, true)
		return o, log.take()
	}
	o, reqs := sent(t0.Add(every - time.Millisecond))
	if len(reqs) != 1 || !strings.HasSuffix(reqs[0], local.Host+" /etcdserverpb.Cluster/MemberList") {
		t.Fatalf("a routine poll within %s of a healthy full probe sent %q; want one member list to %s", every, reqs, local.Host)
	}
	if !o.PeersReused || !o.PeersProbedAt.Equal(t0) || o.ServingVoters() != 3 || o.LeaderID == 0 || o.MemberListError != "" || o.Local.Match != observation.MatchOK || !o.Local.Serving {
		t.Fatalf("a routine poll must read as the healthy cluster: members %+v, leader %x, list error %q, local %+v", o.Members, o.LeaderID, o.MemberListError, o.Local)
	}
	if o, reqs = sent(t0.Add(every)); !fullProbe(reqs) || o.PeersReused {
		t.Fatalf("a routine poll %s after the full probe sent %q; want a full probe (every member)", every, reqs)
	}

	// A new member: the list differs, so the poll probes everyone.
	cli, err := clientv3.New(clientv3.Config{Endpoints: l.Spec.ClientURLs(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	t1 := time.Now()
	if o, _ = sent(t1); o.ServingVoters() != 3 {
		t.Fatalf("cluster not healthy: %+v", o.Members)
	}
	// etcd refuses a change until its leader has been connected to a
	// quorum for a while (a lab just started): retry until it takes it.
	var added *clientv3.MemberAddResponse
	for deadline := time.Now().Add(30 * time.Second); ; {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		added, err = cli.MemberAddAsLearner(actx, []string{"http://127.0.0.1:1"})
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, rpctypes.ErrUnhealthy) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	o, reqs = sent(t1.Add(time.Second))
	if countMethod(reqs, "/etcdserverpb.Cluster/MemberList") < 2 || len(o.Members) != 4 || o.PeersReused {
		t.Fatalf("after a learner was added a routine poll sent %q and saw %d members; want a full probe of all 4", reqs, len(o.Members))
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = cli.MemberRemove(rctx, added.Member.ID)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	// An alarm: the full probe reports it, and no poll reuses a probe
	// that saw one.
	t2 := time.Now()
	if o, _ = sent(t2); o.ServingVoters() != 3 || len(o.Members) != 3 {
		t.Fatalf("cluster not healthy after the learner went: %+v", o.Members)
	}
	mc := pb.NewMaintenanceClient(cli.ActiveConnection())
	alarm := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: o.Local.ID, Alarm: pb.AlarmType_NOSPACE}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = mc.Alarm(actx, alarm)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := cli.AlarmDisarm(dctx, &clientv3.AlarmMember{MemberID: o.Local.ID, Alarm: pb.AlarmType_NOSPACE}); err != nil {
			t.Error(err)
		}
	}()
	o, reqs = sent(t2.Add(every))
	if len(o.Local.Alarms) != 1 || o.Local.Alarms[0] != "NOSPACE" || countMethod(reqs, "/etcdserverpb.Maintenance/Alarm") == 0 {
		t.Fatalf("a full probe with a NOSPACE alarm raised reports alarms %q after %q", o.Local.Alarms, reqs)
	}
	o, reqs = sent(t2.Add(every + time.Second))
	if !fullProbe(reqs) || len(o.Local.Alarms) != 1 || o.PeersReused {
		t.Fatalf("a routine poll after a probe that saw an alarm sent %q and reports alarms %q; want a full probe that reports it", reqs, o.Local.Alarms)
	}
}

// A routine poll reuses the last probe only when the local member answers
// as the member probed (rule 7), of the same cluster, in the same term,
// with the same members; any difference, or a local member that no longer
// answers, makes that same poll a full probe.
func TestARoutinePollFallsBackToAFullProbeOnAnyDifference(t *testing.T) {
	ctx := context.Background()
	l := threeMemberLab(t)
	n := l.Spec.Nodes[0]
	w, err := New(Config{Identity: Identity{Name: n.Member, PeerURLs: []string{n.PeerURL}, ClientURL: n.ClientURL, DataDir: n.DataDir},
		Endpoints: l.Spec.ClientURLs(), PollInterval: time.Hour, ProbeTimeout: 3 * time.Second, GracePeriod: time.Minute, PeerProbeEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var log requestLog
	w.clients.dialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(log.interceptor)}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if o := w.observeTimed(ctx, time.Now(), true); o.ServingVoters() == 3 && !o.PeersReused && w.peers.members != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cluster not healthy")
		}
	}
	healthy := w.peers
	local := slices.IndexFunc(healthy.members, func(m observation.Member) bool { return m.ID == healthy.localID })
	other := (local + 1) % len(healthy.members)
	for _, c := range []struct {
		name   string
		tamper func(p *peerProbe)
	}{
		{"nothing differs", func(p *peerProbe) {}},
		{"another member answers at the local URL", func(p *peerProbe) { p.localID++; p.members[local].ID++ }},
		{"another cluster", func(p *peerProbe) { p.cluster++ }},
		{"another term", func(p *peerProbe) { p.term-- }},
		{"a member's peer URL", func(p *peerProbe) { p.members[other].PeerURLs = []string{"http://127.0.0.1:1"} }},
		{"a member's client URL", func(p *peerProbe) { p.members[other].ClientURLs = []string{"http://127.0.0.1:1"} }},
		{"a member's name", func(p *peerProbe) { p.members[other].Name += "x" }},
		{"a member's role", func(p *peerProbe) { p.members[other].IsLearner = true }},
		{"a member more", func(p *peerProbe) { p.members = append(p.members, observation.Member{ID: 1, Name: "x"}) }},
		{"a member less", func(p *peerProbe) { p.members = slices.Delete(p.members, other, other+1) }},
	} {
		p := healthy
		p.members = slices.Clone(healthy.members)
		for i := range p.members {
			p.members[i].PeerURLs, p.members[i].ClientURLs = slices.Clone(p.members[i].PeerURLs), slices.Clone(p.members[i].ClientURLs)
		}
		c.tamper(&p)
		w.mu.Lock()
		w.peers = p
		w.mu.Unlock()
		log.take()
		o := w.observeTimed(ctx, p.at.Add(time.Second), true)
		reqs := log.take()
		if reused := c.name == "nothing differs"; o.PeersReused != reused || fullProbe(reqs) == reused {
			t.Errorf("%s: the poll reused the probe: %v after %q; want %v", c.name, o.PeersReused, reqs, reused)
		}
		if o.ServingVoters() != 3 || o.Local.ID != healthy.localID {
			t.Errorf("%s: the poll does not show the healthy cluster: %+v", c.name, o.Members)
		}
	}

	// The local data dir goes (etcd still serves from open files): the
	// poll is a full one, so no reused probe is ever an unhealthy member's.
	if o := w.observeTimed(ctx, time.Now(), false); o.ServingVoters() != 3 || w.peers.members == nil {
		t.Fatalf("cluster not healthy: %+v", o.Members)
	}
	aside := n.DataDir + ".aside"
	if err := os.Rename(n.DataDir, aside); err != nil {
		t.Fatal(err)
	}
	log.take()
	o := w.observeTimed(ctx, time.Now(), true)
	reqs := log.take()
	if err := os.Rename(aside, n.DataDir); err != nil {
		t.Fatal(err)
	}
	if o.PeersReused || !fullProbe(reqs) || o.Local.DataDirClass != "missing" {
		t.Fatalf("a routine poll with the data dir gone: reused %v after %q, data dir %q; want a full probe that sees it missing", o.PeersReused, reqs, o.Local.DataDirClass)
	}

	// The local member stops: the same poll probes everyone and says so.
	w.observeTimed(ctx, time.Now(), false)
	if err := l.StopMember(n.Name); err != nil {
		t.Fatal(err)
	}
	if o := w.observeTimed(ctx, time.Now(), true); o.PeersReused || o.Local.Serving || o.ServingVoters() != 2 {
		t.Fatalf("a routine poll after the local member stopped: reused %v, local serving %v, %d serving; want a full probe that sees it down",
			o.PeersReused, o.Local.Serving, o.ServingVoters())
	}
}

// Only a probe that shows nothing amiss is reused: the local member's term
// must be its leader's (the same term then means the same leader), and its
// Status must list no error (no alarm it knows of, asked or not).
func TestOnlyAHealthyProbeInOneTermIsRemembered(t *testing.T) {
	w, err := New(Config{Identity: Identity{Name: "m1", PeerURLs: []string{"http://127.0.0.1:1"}, ClientURL: "http://127.0.0.1:2", DataDir: t.TempDir()},
		PeerProbeEvery: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	member := func(id uint64, term uint64, leader bool) observation.Member {
		return observation.Member{ID: id, Name: fmt.Sprintf("m%d", id), PeerURLs: []string{fmt.Sprintf("http://127.0.0.%d:1", id)},
			ClientURLs: []string{fmt.Sprintf("http://127.0.0.%d:2", id)}, Serving: true, IsLeader: leader, RaftTerm: term}
	}
	healthy := func() observation.Observation {
		return observation.Observation{ClusterID: 0xc1, LeaderID: 2, Members: []observation.Member{member(1, 7, false), member(2, 7, true), member(3, 7, false)},
			Local: observation.Local{Match: observation.MatchOK, ID: 1, Serving: true}}
	}
	for _, c := range []struct {
		name     string
		tamper   func(o *observation.Observation)
		remember bool
	}{
		{"healthy, one term", func(o *observation.Observation) {}, true},
		{"the local member in another term than its leader", func(o *observation.Observation) { o.Members[0].RaftTerm = 8 }, false},
		{"the local member's term unknown", func(o *observation.Observation) { o.Members[0].RaftTerm = 0 }, false},
		{"the local Status lists an error (an alarm)", func(o *observation.Observation) { o.Members[0].Errors = []string{"memberID:1 alarm:NOSPACE"} }, false},
		{"local alarms", func(o *observation.Observation) { o.Local.Alarms = []string{"NOSPACE"} }, false},
		{"a peer not serving", func(o *observation.Observation) { o.Members[2].Serving = false }, false},
		{"a learner", func(o *observation.Observation) { o.Members[2].IsLearner = true }, false},
		{"no leader", func(o *observation.Observation) { o.LeaderID = 0 }, false},
		{"a foreign answer", func(o *observation.Observation) { o.ForeignEndpoints = []string{"http://127.0.0.9:2"} }, false},
		{"no member list", func(o *observation.Observation) { o.MemberListError = "no leader" }, false},
		{"the local member not matched", func(o *observation.Observation) { o.Local.Match = observation.MatchAmbiguous }, false},
	} {
		o := healthy()
		c.tamper(&o)
		w.rememberProbe(time.Now(), o)
		if got := w.peers.members != nil; got != c.remember {
			t.Errorf("%s: remembered %v, want %v", c.name, got, c.remember)
		}
	}
}
