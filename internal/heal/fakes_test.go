package heal

// Fakes for the executor's collaborators (Lease, Observer, Reporter,
// Cluster, member runtime): the executor's paths are tested without a lab.

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeLease: renewing is what a real Lease's renewer does (true from
// TryAcquire until Release); apiDown makes the API unreachable: Current
// fails and Holding is false, while the renewer (and so the hold, once the
// API is back) lives on, exactly the leak of issue 10 item 1.
type fakeLease struct {
	mu                          sync.Mutex
	held, renewing, apiDown     bool
	acquires, releases          int
	downAfterAcquire, confirmOK bool
	acquireDown                 bool            // the API answers reads, not the Lease's take (a hung etcd member behind it)
	needs                       []time.Duration // ConfirmFor's asks, in order
	acquireFails                int             // this many takes fail first (errBoom)
	// other, when set, holds the Lease (unexpired) while we do not.
	other string
}

func (l *fakeLease) TryAcquire(context.Context, lease.Info) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.apiDown || l.acquireDown {
		return lease.ErrAPIUnavailable
	}
	if l.acquireFails > 0 {
		l.acquireFails--
		return errBoom
	}
	if l.other != "" {
		return lease.ErrHeldByOther
	}
	l.held, l.renewing = true, true
	l.acquires++
	if l.downAfterAcquire {
		l.apiDown = true
	}
	return nil
}
func (l *fakeLease) SetPhase(context.Context, string) error { return nil }
func (l *fakeLease) Confirm(context.Context) error {
	if !l.Holding() {
		return lease.ErrNotHeld
	}
	return nil
}
func (l *fakeLease) ConfirmFor(ctx context.Context, need time.Duration) error {
	l.mu.Lock()
	l.needs = append(l.needs, need)
	l.mu.Unlock()
	return l.Confirm(ctx)
}
func (l *fakeLease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releases++
	l.held, l.renewing = false, false
	return nil
}
func (l *fakeLease) Holding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held && !l.apiDown
}
func (l *fakeLease) Current(context.Context) (string, lease.Info, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.apiDown {
		return "", lease.Info{}, false, lease.ErrAPIUnavailable
	}
	if l.held {
		return "node1/m1", lease.Info{}, false, nil
	}
	return l.other, lease.Info{}, false, nil
}

// fakeObserver returns the results in turn, then the last one forever.
// onObserve, if set, is called with the number of the call.
type fakeObserver struct {
	mu        sync.Mutex
	res       []memberstate.Result
	n         int
	onObserve func(n int)
}

func (o *fakeObserver) Observe(context.Context, time.Time) memberstate.Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	if o.onObserve != nil {
		o.onObserve(o.n)
	}
	r := o.res[0]
	if len(o.res) > 1 {
		o.res = o.res[1:]
	}
	return r
}

type fakeReporter struct {
	mu        sync.Mutex
	events    []string // reasons
	last      []nodereport.LastRecovery
	clears    int
	clearErrs []error // returned by ClearRequest in turn, then nil
}

func (r *fakeReporter) Eventf(_, reason, _ string, _ ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, reason)
}
func (r *fakeReporter) SetLastRecovery(_ context.Context, lr nodereport.LastRecovery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = append(r.last, lr)
	return nil
}
func (r *fakeReporter) ClearRequest(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clears++
	if len(r.clearErrs) > 0 {
		err := r.clearErrs[0]
		r.clearErrs = r.clearErrs[1:]
		return err
	}
	return nil
}
func (r *fakeReporter) count(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e == reason {
			n++
		}
	}
	return n
}

// fakeRuntime: with stopHangs, Stop waits for its context to end, as a
// member that never goes away does; stopErr is returned by Stop (after it
// parked the manifest).
type fakeRuntime struct {
	stops, starts int
	stopHangs     bool
	hanging       atomic.Bool // Stop waits now
	stopErr       error
	onStart       func() // runs inside Start (e.g. a start that takes long)
	// onStop, if set, runs inside Stop and its error is Stop's.
	onStop func(ctx context.Context) error
	// aside is the private client URL a StartAside set ("" none); a
	// Start puts the member's own back, as the static-pod runtime does.
	aside       string
	asideStarts int
	cannotAside error // CanSetClientURLsAside's answer
	failAside   error // StartAside's error
}

func (f *fakeRuntime) Stop(ctx context.Context) error {
	f.stops++
	if f.onStop != nil {
		return f.onStop(ctx)
	}
	if f.stopHangs {
		f.hanging.Store(true)
		defer f.hanging.Store(false)
		<-ctx.Done()
		return ctx.Err()
	}
	return f.stopErr
}
func (f *fakeRuntime) Start(context.Context, string) error {
	f.starts++
	f.aside = ""
	if f.onStart != nil {
		f.onStart()
	}
	return nil
}
func (f *fakeRuntime) Stopped() (bool, error) { return f.stops > f.starts+f.asideStarts, nil }
func (f *fakeRuntime) StartAside(context.Context, string) (string, error) {
	if f.failAside != nil {
		return "", f.failAside
	}
	f.asideStarts++
	f.aside = "https://10.0.0.1:12379"
	return f.aside, nil
}
func (f *fakeRuntime) ClientURLsAside() (string, bool, error) { return f.aside, f.aside != "", nil }
func (f *fakeRuntime) CanSetClientURLsAside() error           { return f.cannotAside }
func (f *fakeRuntime) Describe() string                       { return "fake" }

// fakeCluster answers every call; hash is what HashKV says for every member.
type fakeCluster struct {
	calls []string
	hash  uint32
	// removeErr, if set, is what every MemberRemove returns.
	removeErr error
	// addErrs are returned by the next MemberAddAsLearner calls, in order.
	addErrs []error
	// onMoveLeader, if set, runs during MoveLeader (e.g. the Lease is lost meanwhile).
	onMoveLeader func()
	// removed are the IDs MemberRemove was called with.
	removed []uint64
	// onRemove, if set, runs at every MemberRemove call.
	onRemove func()
	// listOf answers MemberListOf; the rig's lists the journal's learner
	// (else the fake's add, 0xa9) at m1's peer URL: every voter applied it.
	listOf func(endpoint string) ([]plan.ListedMember, error)
}

func (c *fakeCluster) MemberRemove(_ context.Context, _ []string, id uint64) error {
	c.calls = append(c.calls, "remove")
	if c.onRemove != nil {
		c.onRemove()
	}
	if c.removeErr != nil {
		return c.removeErr
	}
	c.removed = append(c.removed, id)
	return nil
}
func (c *fakeCluster) MemberAddAsLearner(context.Context, []string, []string) (uint64, error) {
	c.calls = append(c.calls, "add")
	if len(c.addErrs) > 0 {
		err := c.addErrs[0]
		c.addErrs = c.addErrs[1:]
		return 0, err
	}
	return 0xa9, nil
}
func (c *fakeCluster) MemberPromote(context.Context, []string, uint64) error {
	c.calls = append(c.calls, "promote")
	return nil
}
func (c *fakeCluster) MoveLeader(context.Context, []string, uint64) error {
	c.calls = append(c.calls, "move-leader")
	if c.onMoveLeader != nil {
		c.onMoveLeader()
	}
	return nil
}
func (c *fakeCluster) MemberListOf(_ context.Context, ep string) ([]plan.ListedMember, error) {
	if c.listOf == nil {
		return nil, errors.New("no member list in this fake")
	}
	return c.listOf(ep)
}
func (c *fakeCluster) Revision(context.Context, []string) (int64, error) { return 7, nil }
func (c *fakeCluster) HashKV(context.Context, []string, string, int64) (uint32, int64, error) {
	return c.hash, 0, nil
}

var errBoom = errors.New("boom")

// rig is a Healer on fakes, with its state dir.
type rig struct {
	h       *Healer
	lease   *fakeLease
	obs     *fakeObserver
	rep     *fakeReporter
	rt      *fakeRuntime
	cluster *fakeCluster
	m       *metrics.Metrics
	dir     string
}

func newRig(t *testing.T, res ...memberstate.Result) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{lease: &fakeLease{}, obs: &fakeObserver{res: res}, rep: &fakeReporter{}, rt: &fakeRuntime{},
		cluster: &fakeCluster{}, m: metrics.New(), dir: dir}
	r.h = New(Config{Member: "m1", Node: "node1", PeerURLs: []string{peerURL(1)}, DataDir: dir + "/data", StateDir: dir,
		Plan: planConfig(), RecoveryTimeout: 2 * time.Second, StepInterval: 5 * time.Millisecond, Cluster: r.cluster},
		r.obs, func(uint64) (Lease, error) { return r.lease, nil }, r.rt, r.rep, r.m)
	// Hermetic: no test dials a real member (fakeStreams where one streams).
	r.h.streamTo = func(context.Context, string, *tls.Config, string, uint64, func(int64), ...peerseed.StreamOption) (peerseed.Snapshot, error) {
		return peerseed.Snapshot{}, errors.New("no snapshot stream in this rig")
	}
	r.cluster.listOf = func(string) ([]plan.ListedMember, error) {
		j, _, err := journal.Load(dir, "m1")
		id := uint64(j.NewMemberID)
		if id == 0 {
			id = 0xa9 // the fake's add, journaled only in memory yet
		}
		return []plan.ListedMember{{ID: id, PeerURLs: []string{peerURL(1)}}}, err
	}
	return r
}

// journalAt writes an open journal of request req in phase p.
func (r *rig) journalAt(t *testing.T, req string, p journal.Phase, oldID, newID uint64) {
	t.Helper()
	j := journal.Record{ID: "j1", Member: "m1", Node: "node1", Request: req, StartedAt: time.Now().UTC(),
		OldMemberID: journal.MemberID(oldID), NewMemberID: journal.MemberID(newID), PeerURLs: []string{peerURL(1)}}
	j.Advance(p, time.Now().UTC())
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) journal(t *testing.T) journal.Record {
	t.Helper()
	j, _, err := journal.Load(r.dir, "m1")
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (r *rig) refusals(reason string) float64 {
	return testutil.ToFloat64(r.m.RefusalsTotal.WithLabelValues("m1", reason))
}

func peerURL(i int) string { return "https://10.0.0." + string(rune('0'+i)) + ":2380" }

// cluster3 is a 3-voter cluster: member 1 is local (m1, ID 0xa1), serving
// are the listed members; the leader is the first serving peer.
func cluster3(local memberstate.State, serving ...int) memberstate.Result {
	o := observation.Observation{At: time.Now(), ClusterID: 0xc1}
	for i := 1; i <= 3; i++ {
		m := observation.Member{ID: 0xa0 + uint64(i), Name: "m" + string(rune('0'+i)), PeerURLs: []string{peerURL(i)},
			ClientURLs: []string{"https://10.0.0." + string(rune('0'+i)) + ":2379"}, RaftIndex: 100, AppliedIndex: 100}
		for _, s := range serving {
			m.Serving = m.Serving || s == i
		}
		if m.Serving && i > 1 && o.LeaderID == 0 {
			m.IsLeader, o.LeaderID = true, m.ID
		}
		o.Members = append(o.Members, m)
	}
	class := "missing"
	if local == memberstate.Healthy {
		class = "ok"
	}
	o.Local = observation.Local{Name: "m1", PeerURLs: []string{peerURL(1)}, DataDir: "/var/lib/etcd", DataDirClass: class, DataDirVerified: true,
		Match: observation.MatchOK, ID: 0xa1, Serving: o.Members[0].Serving}
	return memberstate.Result{Observation: o, Verdict: memberstate.Verdict{State: local, Reason: string(local)}}
}

func planConfig() plan.Config {
	return plan.Config{AutoHeal: true, MaxLearnerLag: 1000, LearnerStallTimeout: 5 * time.Minute,
		RetryBackoff: time.Minute, MaxRetryBackoff: 8 * time.Minute}
}
