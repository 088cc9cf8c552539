package heal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// trace records, in order, the fences and the destructive calls of a
// recovery on fakes; after runs after each destructive call.
type trace struct {
	mu    sync.Mutex
	ev    []string
	after func(op string)
}

func (t *trace) add(s string, destructive bool) {
	t.mu.Lock()
	t.ev = append(t.ev, s)
	after := t.after
	t.mu.Unlock()
	if destructive && after != nil {
		after(s)
	}
}

// reset forgets the events so far.
func (t *trace) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ev = nil
}

func (t *trace) events() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.ev...)
}

// tracedLease records each fence and the time it asked for; "+data" when
// the data dir was still in place.
type tracedLease struct {
	*fakeLease
	tr      *trace
	dataDir string
}

func (l tracedLease) note(need time.Duration) {
	s := fmt.Sprintf("fence(%s)", need)
	if _, err := os.Stat(l.dataDir); err == nil {
		s += "+data"
	}
	l.tr.add(s, false)
}
func (l tracedLease) ConfirmFor(ctx context.Context, need time.Duration) error {
	l.note(need)
	return l.fakeLease.ConfirmFor(ctx, need)
}

type tracedRuntime struct {
	*fakeRuntime
	tr *trace
}

func (r tracedRuntime) Stop(ctx context.Context) error {
	r.tr.add("stop", true)
	return r.fakeRuntime.Stop(ctx)
}
func (r tracedRuntime) Start(ctx context.Context, ic string) error {
	if r.aside != "" {
		r.tr.add("restart-on-own-client-urls", true)
	}
	return r.fakeRuntime.Start(ctx, ic)
}

type tracedCluster struct {
	*fakeCluster
	tr *trace
}

func (c tracedCluster) MemberRemove(ctx context.Context, eps []string, id uint64) error {
	c.tr.add("remove", true)
	return c.fakeCluster.MemberRemove(ctx, eps, id)
}
func (c tracedCluster) MemberAddAsLearner(ctx context.Context, eps, peers []string) (uint64, error) {
	c.tr.add("add", true)
	return c.fakeCluster.MemberAddAsLearner(ctx, eps, peers)
}
func (c tracedCluster) MemberPromote(ctx context.Context, eps []string, id uint64) error {
	c.tr.add("promote", true)
	return c.fakeCluster.MemberPromote(ctx, eps, id)
}
func (c tracedCluster) MoveLeader(ctx context.Context, eps []string, to uint64) error {
	c.tr.add("move-leader", false)
	return c.fakeCluster.MoveLeader(ctx, eps, to)
}

// tracedRig is a rig whose Lease, runtime and cluster record into one trace.
func tracedRig(t *testing.T, res ...memberstate.Result) (*rig, *trace) {
	t.Helper()
	r := newRig(t, res...)
	tr := &trace{}
	l := tracedLease{fakeLease: r.lease, tr: tr, dataDir: r.h.cfg.DataDir}
	r.h.newLease = func(uint64) (Lease, error) { return l, nil }
	r.h.runtime = tracedRuntime{fakeRuntime: r.rt, tr: tr}
	r.h.cluster = tracedCluster{fakeCluster: r.cluster, tr: tr}
	return r, tr
}

// localLeader: all serving, the local member m1 leads (a manual rejoin of a
// healthy member: the stop is preceded by a leadership hand-off).
func localLeader() memberstate.Result {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	o := &res.Observation
	for i := range o.Members {
		o.Members[i].IsLeader = i == 0
	}
	o.LeaderID = 0xa1
	return res
}

// rejoined: the old member removed, learner 0xa9 with our peer URL; serving
// (caught up) or not.
func rejoined(serving bool) memberstate.Result {
	res := cluster3(memberstate.Learner, 2, 3)
	o := &res.Observation
	o.Members = o.Members[1:]
	o.Members = append(o.Members, observation.Member{ID: 0xa9, Name: "m1", PeerURLs: []string{peerURL(1)},
		ClientURLs: []string{"https://10.0.0.1:2379"}, IsLearner: true, Serving: serving, RaftIndex: 100, AppliedIndex: 100})
	o.Local.ID, o.Local.IsLearner, o.Local.Serving = 0xa9, true, serving
	return res
}

// promoted: rejoined, the learner promoted and serving, all 3 voters healthy.
func promoted() memberstate.Result {
	res := rejoined(true)
	o := &res.Observation
	o.Members[len(o.Members)-1].IsLearner, o.Local.IsLearner = false, false
	res.Verdict.State = memberstate.Healthy
	return res
}

// Issue 10 item 4: every destructive step is fenced right before it, for
// longer than the step's own timeout: a fence whose hold may end in the
// middle of the step is no fence. Each case runs one step and stops (the
// agent shuts down after the first destructive call).
func TestEveryDestructiveStepIsFencedForItsOwnTimeout(t *testing.T) {
	timeout := map[string]time.Duration{"stop": stopTimeout, "remove": memberChangeTimeout, "add": memberChangeTimeout, "promote": memberChangeTimeout,
		"restart-on-own-client-urls": memberChangeTimeout}
	for _, tc := range []struct {
		name      string
		res       memberstate.Result
		req       string
		phase     journal.Phase
		oldID     uint64
		newID     uint64
		stalledAt time.Time
		aside     bool // the member's client URLs are set aside (a 3.5 learner's start)
		op        string
	}{
		{name: "stop", res: localLeader(), req: "rejoin", phase: journal.PhaseStarted, oldID: 0xa1, op: "stop"},
		{name: "remove", res: cluster3(memberstate.Lost, 2, 3), req: "auto", phase: journal.PhaseSnapshotted, oldID: 0xa1, op: "remove"},
		{name: "add", res: func() memberstate.Result {
			r := rejoined(false)
			r.Observation.Members = r.Observation.Members[:2]
			return r
		}(),
			req: "auto", phase: journal.PhaseRemoved, oldID: 0xa1, op: "add"},
		{name: "promote", res: rejoined(true), req: "auto", phase: journal.PhaseMemberStarted, oldID: 0xa1, newID: 0xa9, op: "promote"},
		{name: "stalled-learner", res: rejoined(false), req: "auto", phase: journal.PhaseMemberStarted, oldID: 0xa1, newID: 0xa9,
			stalledAt: time.Now().Add(-time.Hour), op: "remove"},
		{name: "restart-on-own-client-urls", res: promoted(), req: "auto", phase: journal.PhasePromoted, oldID: 0xa1, newID: 0xa9,
			aside: true, op: "restart-on-own-client-urls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, tr := tracedRig(t, tc.res)
			r.journalAt(t, tc.req, tc.phase, tc.oldID, tc.newID)
			if tc.aside {
				r.rt.aside = "https://10.0.0.1:12379"
			}
			if !tc.stalledAt.IsZero() {
				j := r.journal(t)
				j.LearnerProgressAt = tc.stalledAt
				if err := journal.Save(r.dir, j); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr.after = func(string) { cancel() }
			_ = r.lease.TryAcquire(ctx, lease.Info{})
			r.h.Consider(ctx, tc.res, nil)
			ev := tr.events()
			i := indexOf(ev, tc.op)
			if i < 0 {
				t.Fatalf("no %s in %v", tc.op, ev)
			}
			var need time.Duration
			if i > 0 {
				need, _ = time.ParseDuration(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(ev[i-1], "fence("), "+data"), ")"))
			}
			if i == 0 || !strings.HasPrefix(ev[i-1], "fence(") || need < timeout[tc.op] {
				t.Fatalf("%s not fenced right before it for at least its timeout %s: %v", tc.op, timeout[tc.op], ev)
			}
		})
	}
}

func indexOf(ev []string, op string) int {
	for i, e := range ev {
		if e == op {
			return i
		}
	}
	return -1
}

// Issue 10 item 4: the stop is fenced after the leadership hand-off (which
// may take 10 s): a Lease lost meanwhile stops the recovery before the
// member is stopped. Before, the stop rested on the Lease state read before
// MoveLeader.
func TestStopIsFencedAfterTheLeaderHandOff(t *testing.T) {
	r, tr := tracedRig(t, localLeader())
	r.journalAt(t, "rejoin", journal.PhaseStarted, 0xa1, 0)
	_ = r.lease.TryAcquire(context.Background(), lease.Info{})
	r.cluster.onMoveLeader = func() { // another agent takes the Lease meanwhile
		r.lease.mu.Lock()
		r.lease.held, r.lease.other = false, "node2/m2"
		r.lease.mu.Unlock()
	}
	out := r.h.Consider(context.Background(), localLeader(), nil)
	if r.rt.stops != 0 {
		t.Fatalf("the member was stopped after the Lease was lost during the hand-off: %v (outcome %+v)", tr.events(), out.Decision)
	}
	if j := r.journal(t); !j.Active() {
		t.Fatalf("journal closed (%s, %s); want it open for the next holder", j.Result, j.Message)
	}
}

// Issue 10 item 4: the quarantine is fenced too, right before the rename
// (after the stop, whose wait may have taken its whole timeout).
func TestQuarantineIsFencedRightBeforeTheRename(t *testing.T) {
	r, tr := tracedRig(t, localLeader())
	if err := os.MkdirAll(filepath.Join(r.h.cfg.DataDir, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	r.journalAt(t, "rejoin", journal.PhaseStarted, 0xa1, 0)
	_ = r.lease.TryAcquire(context.Background(), lease.Info{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.obs.onObserve = func(int) { cancel() } // one step
	r.h.Consider(ctx, localLeader(), nil)
	ev := tr.events()
	i := indexOf(ev, "stop")
	if i < 0 || i+1 >= len(ev) || ev[i+1] != fmt.Sprintf("fence(%s)+data", quarantineTimeout) {
		t.Fatalf("no fence of %s between the stop and the quarantine: %v", quarantineTimeout, ev)
	}
	if j := r.journal(t); j.QuarantinePath == "" {
		t.Fatalf("data dir not quarantined: journal %+v", j)
	}
}

// A stop whose wait outlasts one fenced slice (etcd slow to go) is fenced
// again before each further slice of the wait: the Lease is proven for
// every moment the member may still be going down, and a Lease lost
// meanwhile ends the stop at the next slice, the journal left open.
func TestASlowStopIsFencedAgainWhileItWaits(t *testing.T) {
	r, tr := tracedRig(t, cluster3(memberstate.Lost, 2, 3))
	r.h.stopSlice = 20 * time.Millisecond
	r.h.cfg.StepTimeouts = map[plan.Action]time.Duration{plan.StopMember: time.Minute}
	r.h.cfg.RecoveryTimeout = time.Minute
	r.rt.stopHangs = true
	stops := 0
	tr.after = func(op string) {
		if op == "stop" {
			if stops++; stops == 3 {
				r.lease.mu.Lock()
				r.lease.held, r.lease.other = false, "node2/m2"
				r.lease.mu.Unlock()
			}
		}
	}
	out := r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	ev := tr.events()
	slice := fmt.Sprintf("fence(%s)", r.h.stopSlice)
	want := []string{slice, "stop", slice, "stop", slice, "stop", slice}
	if strings.Join(ev, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v (each slice of the stop fenced; none after the Lease was lost)", ev, want)
	}
	if j := r.journal(t); !j.Active() || out.Decision.Reason != plan.ReasonLeaseLost {
		t.Fatalf("outcome %+v, journal phase %s result %q; want lease-lost with the journal open", out.Decision, j.Phase, j.Result)
	}
}
