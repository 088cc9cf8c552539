package watchdog

import (
	"context"
	"errors"
	"fmt"
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

func (r *requestLog) streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	r.mu.Lock()
	r.sent = append(r.sent, cc.Target()+" "+method)
	r.mu.Unlock()
	return streamer(ctx, desc, cc, method, opts...)
}

func (r *requestLog) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(r.interceptor), grpc.WithChainStreamInterceptor(r.streamInterceptor)}
}

const watchMethod = "/etcdserverpb.Watch/Watch"

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

// A routine poll of a healthy cluster sends nothing while every member's
// liveness stream stays open: the full probe opens one require-leader
// watch stream per member, once, and the polls reuse that probe until it
// is --peer-probe-interval old. A change of membership (a learner) shows
// at the next full probe, after which every poll is a full probe while
// the learner is there; an alarm likewise. A full probe asks for alarms
// only when a member's Status lists any.
func TestARoutinePollOfALiveHealthyClusterSendsNothing(t *testing.T) {
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
	w.clients.dialOptions = log.dialOptions()

	// Outside Run (a one-shot status, the gate) no stream is opened.
	for deadline := time.Now().Add(30 * time.Second); w.Observe(ctx, time.Now()).ServingVoters() != 3 || w.peers.members == nil; {
		if time.Now().After(deadline) {
			t.Fatal("cluster not healthy")
		}
	}
	if got := countMethod(log.take(), watchMethod); got != 0 {
		t.Fatalf("a one-shot observation opened %d liveness streams", got)
	}
	w.running.Store(true) // the polls below are Run's

	// A full probe of the healthy cluster, at t0.
	var o observation.Observation
	var t0 time.Time
	var reqs []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		t0 = time.Now()
		if o = w.observeTimed(ctx, t0, true); o.ServingVoters() == 3 && o.LeaderID != 0 && !o.PeersReused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not healthy: %+v", o.Members)
		}
	}
	reqs = log.take()
	if got := countMethod(reqs, "/etcdserverpb.Maintenance/Alarm"); got != 0 {
		t.Fatalf("a full probe of a cluster without alarms asked for alarms %d times", got)
	}
	if got := countMethod(reqs, watchMethod); got != 3 {
		t.Fatalf("the healthy full probe opened %d liveness streams; want one per member (3)", got)
	}

	sent := func(at time.Time) (observation.Observation, []string) {
		o := w.observeTimed(ctx, at, true)
		return o, log.take()
	}
	o, reqs = sent(t0.Add(every - time.Millisecond))
	if len(reqs) != 0 {
		t.Fatalf("a routine poll within %s of a healthy full probe sent %q; want nothing", every, reqs)
	}
	if !o.PeersReused || !o.PeersProbedAt.Equal(t0) || o.ServingVoters() != 3 || o.LeaderID == 0 || o.MemberListError != "" ||
		o.Local.Match != observation.MatchOK || !o.Local.Serving || o.Local.AnsweringID != o.Local.ID {
		t.Fatalf("a routine poll must read as the healthy cluster: members %+v, leader %x, list error %q, local %+v", o.Members, o.LeaderID, o.MemberListError, o.Local)
	}
	if o, reqs = sent(t0.Add(every)); !fullProbe(reqs) || o.PeersReused || countMethod(reqs, watchMethod) != 0 {
		t.Fatalf("a routine poll %s after the full probe sent %q; want a full probe (every member) and no new stream", every, reqs)
	}

	// A new member: the next full probe sees it, and no poll reuses a
	// probe with a learner.
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
	if o, reqs = sent(t1.Add(every)); len(o.Members) != 4 || o.PeersReused {
		t.Fatalf("the full probe after a learner was added sent %q and saw %d members; want all 4", reqs, len(o.Members))
	}
	if o, reqs = sent(t1.Add(every + time.Second)); !fullProbe(reqs) || len(o.Members) != 4 || o.PeersReused {
		t.Fatalf("a routine poll while a learner is there sent %q and saw %d members; want a full probe of all 4", reqs, len(o.Members))
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

// waitEnded waits (bounded) for a liveness stream to end.
func waitEnded(t *testing.T, w *Watchdog, within time.Duration, what string) {
	t.Helper()
	select {
	case <-w.live.ended:
	case <-time.After(within):
		t.Fatalf("%s: no liveness stream ended within %s", what, within)
	}
}

// healthyProbe polls until a full probe of the healthy cluster is
// remembered.
func healthyProbe(t *testing.T, w *Watchdog) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		w.mu.Lock()
		w.peers = peerProbe{}
		w.mu.Unlock()
		if o := w.observeTimed(context.Background(), time.Now(), true); o.ServingVoters() == 3 && w.peers.members != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("cluster not healthy")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A member that exits, or loses its leader, ends its liveness stream: Run
// observes at once (not at its next tick), and that poll, and every one
// until a full probe of a healthy cluster, probes every member. So does
// a local data dir that goes. A stream answered by another member or
// cluster than the one probed is not opened (rule 7).
func TestAnEndedLivenessStreamMakesTheNextPollAFullProbe(t *testing.T) {
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
	w.clients.dialOptions = log.dialOptions()
	w.nextTick = func(time.Time) time.Duration { return time.Hour } // Run polls only when woken
	w.running.Store(true)                                           // the polls below are Run's
	healthyProbe(t, w)

	// Rule 7: a stream is kept only when the member probed answers it.
	p := w.peers
	li := slices.IndexFunc(p.members, func(m observation.Member) bool { return m.ID == p.localID })
	if _, err := w.live.open(w.clients, p.localID+1, n.ClientURL, p.cluster, time.Second); err == nil {
		t.Fatal("a liveness stream answered by another member was opened")
	}
	if _, err := w.live.open(w.clients, p.localID, n.ClientURL, p.cluster+1, time.Second); err == nil {
		t.Fatal("a liveness stream answered for another cluster was opened")
	}
	if li < 0 {
		t.Fatal("the local member is not in the probe")
	}

	// A member no longer listed (removed, or its URL changed): its stream
	// is closed, without waking Run, and the probe no longer counts as
	// live until a healthy probe opens it again.
	drop := (li + 1) % len(p.members)
	w.live.mu.Lock()
	dropped := w.live.byID[p.members[drop].ID]
	w.live.mu.Unlock()
	if dropped == nil {
		t.Fatal("the healthy probe opened no stream to every member")
	}
	if err := w.live.ensure(w.clients, slices.Delete(slices.Clone(p.members), drop, drop+1), p.cluster, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dropped.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream of a member no longer listed is still running")
	}
	if len(w.live.ended) != 0 || w.live.intact(p.members) {
		t.Fatalf("closing the stream of a member no longer listed: woke Run %v, probe still live %v", len(w.live.ended) != 0, w.live.intact(p.members))
	}
	healthyProbe(t, w)
	if !w.live.intact(w.peers.members) {
		t.Fatal("a healthy probe did not open the dropped member's stream again")
	}

	// A peer exits: Run (polling hourly) observes at once.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	seen := make(chan observation.Observation, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(rctx, func(o observation.Observation) { seen <- o })
	}()
	if o := <-seen; !o.PeersReused {
		t.Fatalf("Run's first poll, right after a healthy full probe, did not reuse it: %+v", o.Members)
	}
	log.take()
	w.live.mu.Lock()
	var stopping *liveStream
	for _, m := range p.members {
		if len(m.ClientURLs) > 0 && m.ClientURLs[0] == l.Spec.Nodes[2].ClientURL {
			stopping = w.live.byID[m.ID]
		}
	}
	w.live.mu.Unlock()
	if stopping == nil {
		t.Fatal("no liveness stream to the peer about to stop")
	}
	stopAt := time.Now()
	if err := l.StopMember(l.Spec.Nodes[2].Name); err != nil {
		t.Fatal(err)
	}
	// etcd stops gracefully: GOAWAY, then it waits for open streams up to
	// its request timeout (5 s + two election timeouts: 7 s here) before
	// it cuts them. The stream must end on the GOAWAY, so the stop is not
	// held to that fallback.
	if took := time.Since(stopAt); !stopping.goaway.Load() || took >= 5*time.Second {
		t.Fatalf("a member stopping gracefully took %s to stop; its liveness stream ended on the GOAWAY: %v (a stream held open holds etcd's stop ~7 s)", took, stopping.goaway.Load())
	}
	select {
	case o := <-seen:
		// (2 serve, or fewer while the two left elect a leader)
		if reqs := log.take(); o.PeersReused || o.ServingVoters() > 2 || countMethod(reqs, "/etcdserverpb.Maintenance/Status") < 2 {
			t.Fatalf("Run's poll after a peer exited: reused %v, %d serving, sent %q; want a full probe without it", o.PeersReused, o.ServingVoters(), reqs)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not observe within 15 s of a peer exiting (its next tick is an hour away)")
	}
	stop()
	<-done
	w.running.Store(true)
	if err := l.StartMember(l.Spec.Nodes[2].Name); err != nil {
		t.Fatal(err)
	}
	healthyProbe(t, w)

	// The local member loses its leader (both peers stop): etcd cancels
	// its require-leader stream within three election timeouts.
	for len(w.live.ended) > 0 {
		<-w.live.ended
	}
	for _, p := range l.Spec.Nodes[1:] {
		if err := l.StopMember(p.Name); err != nil {
			t.Fatal(err)
		}
	}
	waitEnded(t, w, 20*time.Second, "peers stopped")
	deadline := time.Now().Add(20 * time.Second)
	for w.live.intact(p.members[li : li+1]) {
		if time.Now().After(deadline) {
			t.Fatal("the local member's stream stayed open without a leader")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if o := w.observeTimed(ctx, time.Now(), true); o.PeersReused || o.Local.Serving {
		t.Fatalf("a routine poll after the local member lost its leader: reused %v, local serving %v; want a full probe that sees it not serving", o.PeersReused, o.Local.Serving)
	}
	for _, p := range l.Spec.Nodes[1:] {
		if err := l.StartMember(p.Name); err != nil {
			t.Fatal(err)
		}
	}
	healthyProbe(t, w)

	// The local data dir goes (etcd still serves from open files): the
	// poll is a full one, so no reused probe is ever an unhealthy member's.
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

	// The local member stops: its stream ends, and the next poll probes
	// everyone and says so.
	healthyProbe(t, w)
	for len(w.live.ended) > 0 {
		<-w.live.ended
	}
	if err := l.StopMember(n.Name); err != nil {
		t.Fatal(err)
	}
	waitEnded(t, w, 10*time.Second, "local member stopped")
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
