package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/test/chaos/internal/linearize"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Options configure one chaos run.
type Options struct {
	Seed uint64
	Mode Mode
	// Duration is how long faults are drawn; the run then settles and checks.
	Duration time.Duration
	// Dir is the lab's folder; BinDir and AgentBinary as for lab.Up.
	Dir, BinDir, AgentBinary string
	// Settle bounds the wait for a healthy cluster after each episode and
	// at the end (default 4m).
	Settle time.Duration
	// Unavailable is the longest time every member may fail linearizable
	// reads outside a majority fault before it counts as lost quorum
	// (default 5s: a leader fault costs an election, up to two election
	// timeouts, plus a probe's deadline).
	Unavailable time.Duration
	// Progress, when set, gets one line per episode (a test's t.Logf).
	Progress func(format string, args ...any)
	Log      *zap.Logger
}

// runner is one run's state. Lab calls go through withLab: the extra's
// goroutine and the episode's share the lab's Spec.
type runner struct {
	o     Options
	l     *lab.Lab
	log   *zap.Logger
	labMu sync.Mutex
	nodes atomic.Pointer[[]lab.Node] // a copy for the observers

	mu              sync.Mutex
	slots           []string // member slot → node that runs it now
	faults          map[Kind]int
	majorityWindows []Window

	ledger  *ledger
	ids     *identityWatch
	lease   *leaseWatch
	members *invariant.MembershipWatch
	writer  *invariant.Writer
	prober  *invariant.Prober
	load    *linearize.Load
	clients *clientCache
	obs     *observers

	features    features
	lastSettled map[string]uint64 // member IDs after the last episode settled
	lastEpisode int
}

func (r *runner) withLab(f func() error) error {
	r.labMu.Lock()
	defer r.labMu.Unlock()
	return f()
}

// publishNodes copies the lab's nodes for the observers (labMu held).
func (r *runner) publishNodes() {
	ns := append([]lab.Node(nil), r.l.Spec.Nodes...)
	r.nodes.Store(&ns)
}

func (r *runner) slotNode(i int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.slots[i]
}

func (r *runner) count(k Kind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults[k]++
}

// Run brings a lab up, plays the seed's schedule for o.Duration, settles,
// checks every invariant and stops the lab. The error is for a run that
// could not be made; broken invariants are in Report.Violations.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Settle == 0 {
		o.Settle = 4 * time.Minute
	}
	if o.Unavailable == 0 {
		o.Unavailable = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	rep := &Report{Seed: o.Seed, Mode: o.Mode, Duration: o.Duration}
	lo := lab.Options{Dir: o.Dir, Nodes: 3, BinDir: o.BinDir, AgentBinary: o.AgentBinary, Agents: true, Log: o.Log,
		PeerProxy: true, DiskLimit: labDiskLimit, AgentArgs: []string{"--quarantine-keep=1000", "--grace-period=" + gracePeriod.String()}}
	uctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	l, err := lab.Up(uctx, lo)
	cancel()
	if l != nil {
		defer func() {
			if derr := l.Down(context.WithoutCancel(ctx)); derr != nil {
				rep.Violations = append(rep.Violations, "lab down: "+derr.Error())
			}
		}()
	}
	if err != nil {
		return rep, fmt.Errorf("lab up: %w", err)
	}
	features := availableFeatures(l)
	rep.Unavailable = features.missing()
	sched, err := NewSchedule(o.Seed, o.Mode, 3, func(k Kind) bool { return features.has(catalog[k].needs) })
	if err != nil {
		return rep, err
	}
	r := &runner{o: o, l: l, log: o.Log, faults: map[Kind]int{}, slots: []string{"node1", "node2", "node3"}, features: features}
	r.publishNodes()
	if err := r.startObservers(ctx); err != nil {
		r.stopObservers()
		if r.clients != nil {
			r.clients.close()
		}
		return rep, err
	}
	r.playSchedule(ctx, sched, rep)
	r.finish(ctx, rep)
	return rep, nil
}

// playSchedule plays episodes until the run's time is up or the cluster does not
// settle (a second fault on an unhealed cluster could take a majority).
func (r *runner) playSchedule(ctx context.Context, sched *Schedule, rep *Report) {
	start := time.Now()
	var settled map[string]uint64 // member IDs when the last episode settled
	last := 0
	for time.Since(start) < r.o.Duration && ctx.Err() == nil {
		e := sched.Next()
		if !r.features.has(catalog[e.Kind].needs) {
			rep.Episodes = append(rep.Episodes, Played{Episode: e, Skipped: "not available here"})
			continue
		}
		before := r.memberIDs(ctx)
		if changed := changedIDs(settled, before, ""); changed != "" {
			rep.Violations = append(rep.Violations, fmt.Sprintf("members rejoined after episode #%d had settled, with no fault: %s", last, changed))
		}
		rejoin := ""
		at := time.Since(start).Round(time.Second)
		node, err := r.play(ctx, e)
		played := Played{Episode: e, At: at, Node: node}
		if err != nil {
			played.Err = err.Error()
			r.o.Progress("chaos seed %d: #%d %s on %s: fault not made: %v", r.o.Seed, e.N, e.Kind, node, err)
		} else if catalog[e.Kind].healing || e.Kind == MajorityStopWipe {
			rejoin = r.memberOf(e.Slot) // majority-stop-wipe wipes the first slot
		}
		serr := r.settle(ctx, rejoin, before)
		played.Settled = time.Since(start).Round(time.Second) - at
		rep.Episodes = append(rep.Episodes, played)
		r.o.Progress("chaos seed %d: %s", r.o.Seed, played)
		if serr != nil {
			rep.Violations = append(rep.Violations, fmt.Sprintf("episode #%d (%s on %s): %v", e.N, e.Kind, node, serr))
			return
		}
		settled, last = r.memberIDs(ctx), e.N
		if f := catalog[e.Kind]; !f.healing && !f.mayRejoin {
			if changed := changedIDs(before, settled, rejoin); changed != "" {
				rep.Violations = append(rep.Violations, fmt.Sprintf("episode #%d (%s on %s) needs no rejoin, yet members were rejoined: %s", e.N, e.Kind, node, changed))
			}
		}
		if e.Gap > 0 {
			t := time.NewTimer(e.Gap)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	r.lastSettled, r.lastEpisode = settled, last
}

// settle waits until every slot's member is a healthy voter, no learner,
// and every slot's agent says so too (healthy member, data dir ok, no
// recovery): the cluster alone can look healthy while a wiped member still
// serves from unlinked files. After a fault that needs a rejoin, the
// member must also have a new ID: the heal must have happened.
func (r *runner) settle(ctx context.Context, rejoin string, before map[string]uint64) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, r.o.Settle, true, func(ctx context.Context) (bool, error) {
		var st lab.Status
		_ = r.withLab(func() error { st = r.l.Status(ctx); return nil })
		voters, healthy := st.Healthy()
		if voters != len(r.slots) || healthy != voters || len(st.Members) != voters || st.LeaderID == "" {
			last = "cluster: " + st.Summary()
			return false, nil
		}
		if rejoin != "" {
			if now := r.memberIDs(ctx); before[rejoin] != 0 && now[rejoin] == before[rejoin] {
				last = fmt.Sprintf("member %s not rejoined yet (still %x)", rejoin, before[rejoin])
				return false, nil
			}
		}
		for i := range r.slots {
			if why := r.agentNotSettled(ctx, r.slotNode(i)); why != "" {
				last = why
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("not settled within %s: %s", r.o.Settle, last)
	}
	return nil
}

// agentNotSettled says why node's agent does not see its member healthy
// with an ok data dir and no recovery ("" when it does).
func (r *runner) agentNotSettled(ctx context.Context, node string) string {
	var m lab.Metrics
	var err error
	_ = r.withLab(func() error { m, err = r.l.AgentMetrics(ctx, node); return nil })
	if err != nil {
		return fmt.Sprintf("agent on %s: %v", node, err)
	}
	state := m.OneHot("etcd_agent_member_state", "state")
	dir := m.OneHot("etcd_agent_data_dir_status", "status")
	busy, _ := m.Value("etcd_agent_recovery_in_progress", nil)
	if state != "healthy" || dir != "ok" || busy != 0 {
		return fmt.Sprintf("agent on %s sees member %s, data dir %s, recovery in progress %v", node, state, dir, busy)
	}
	return ""
}

// memberOf is the etcd member name of a slot (a moved member keeps it).
func (r *runner) memberOf(slot int) string {
	name := r.slotNode(slot)
	var member string
	_ = r.withLab(func() error {
		if n, err := r.l.Spec.Node(name); err == nil {
			member = n.Member
		}
		return nil
	})
	return member
}

// memberIDs maps member name → ID from the member list (empty if unread).
func (r *runner) memberIDs(ctx context.Context) map[string]uint64 {
	cli, err := r.clients.all(r.l)
	if err != nil {
		return nil
	}
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(mctx)
	if err != nil {
		return nil
	}
	out := map[string]uint64{}
	for _, m := range resp.Members {
		out[m.Name] = m.ID
	}
	return out
}

// changedIDs lists the members whose ID changed, but excused's.
func changedIDs(before, after map[string]uint64, excused string) string {
	if before == nil || after == nil {
		return ""
	}
	var out []string
	for name, id := range before {
		if a, ok := after[name]; ok && a != id && name != excused {
			out = append(out, fmt.Sprintf("%s %x → %x", name, id, a))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// leaderNode is the node whose member leads now.
func (r *runner) leaderNode(ctx context.Context) (string, error) {
	var st lab.Status
	_ = r.withLab(func() error { st = r.l.Status(ctx); return nil })
	for _, m := range st.Members {
		if m.Leader && m.Node != "" {
			return m.Node, nil
		}
	}
	return "", errors.New("no leader to hit: " + st.Summary())
}

// clientCache keeps one etcd client per endpoint set for the observers.
type clientCache struct {
	mu  sync.Mutex
	m   map[string]*clientv3.Client
	mk  func(...string) (*clientv3.Client, error)
	eps []string
}

func (c *clientCache) get(eps ...string) (*clientv3.Client, error) {
	key := fmt.Sprint(eps)
	c.mu.Lock()
	defer c.mu.Unlock()
	if cli, ok := c.m[key]; ok {
		return cli, nil
	}
	cli, err := c.mk(eps...)
	if err != nil {
		return nil, err
	}
	c.m[key] = cli
	return cli, nil
}

// all is a client for every member's URL (they stay the same across a
// move: a moved member keeps its client URL).
func (c *clientCache) all(*lab.Lab) (*clientv3.Client, error) { return c.get(c.eps...) }

func (c *clientCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cli := range c.m {
		cli.Close()
	}
	c.m = map[string]*clientv3.Client{}
}
