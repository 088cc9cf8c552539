// Package forcearm is the controller that arms a person's
// --force-new-cluster request on a StatefulSet member (the majority-lost
// restore, docs/management-nodes.md "Majority lost"): it holds the
// cluster's recovery Lease for the request and marks it armed, so that the
// start gate, which cannot reach the Lease, uses one request per cluster at
// a time (docs/design.md §7). plan.DecideForceArm decides; this package
// reads the files, takes the Lease and writes the mark.
package forcearm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// Lease is the cluster's recovery Lease as the arm uses it (*lease.Lease).
type Lease interface {
	TryAcquire(ctx context.Context, info lease.Info) error
	ConfirmFor(ctx context.Context, need time.Duration) error
	Confirm(ctx context.Context) error
	Current(ctx context.Context) (holder string, info lease.Info, expired bool, err error)
	Release(ctx context.Context) error
	Abandon()
	Holding() bool
}

// Phase is what the Lease says its holder does while a request is armed.
const Phase = "force-new-cluster-armed"

// Config is what the arm is told.
type Config struct {
	StateDir string // the member's own
	Member   string
	// NewLease opens the recovery Lease of a cluster, as Holder: a name
	// of the arm's own (not the healer's), written in the mark.
	NewLease func(clusterID uint64) (Lease, error)
	Holder   string
	// ValidFor is how long a mark is good for after the Lease was
	// confirmed to last longer than that (below the Lease's TTL).
	ValidFor time.Duration
	Log      *zap.Logger
	Now      func() time.Time // default time.Now
}

// Arm is one member's arm; Consider runs at every poll, Close when the
// member's loop ends.
type Arm struct {
	c Config
	// lease is kept across polls: a takeover of an expired hold needs
	// the same handle to have seen it unchanged for the TTL.
	lease    Lease
	leaseFor uint64
	held     bool // acquired by this process, not released since
	// mark is the latest mark written, live or set aside: remembered, so
	// that a mark the disk lost (removed by hand, a failed write) still
	// ends as plan says.
	mark        *plan.ForceArm
	live        bool
	lastKeepErr string
	// lastWhy: what was last said ("armed" when armed); "-" at start, so
	// that the first poll clears a word left by an earlier run.
	lastWhy string
}

// New returns the arm.
func New(c Config) *Arm {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	return &Arm{c: c, lastWhy: "-"}
}

// Close ends the arm with its member's loop: a Lease held stops being
// renewed but is not cleared, so it expires, unless the member's next loop
// (same holder name) takes it up again from the mark on disk.
func (a *Arm) Close() {
	if a.held {
		a.lease.Abandon()
		a.held = false
	}
}

// Consider observes the request, the mark and the agent's verdict r, asks
// plan.DecideForceArm and acts.
func (a *Arm) Consider(ctx context.Context, r memberstate.Result) {
	in := a.observe(r)
	d := plan.DecideForceArm(in)
	switch d.Action {
	case plan.ForceArmArm:
		a.arm(ctx, in, d)
		return
	case plan.ForceArmHold:
		a.keep(ctx, in, d.Why)
	case plan.ForceArmDisarm:
		if err := memberruntime.SetForceArmAside(a.c.StateDir); err != nil {
			a.c.Log.Error("the --force-new-cluster arm mark cannot be set aside (the gate takes it as none once its time is over)", zap.Error(err))
		} else {
			a.live = false
		}
		a.keep(ctx, in, d.Why)
	case plan.ForceArmWait:
		a.keep(ctx, in, d.Why)
	case plan.ForceArmRelease:
		a.release(ctx, in.ClusterID)
	}
	a.say(d.Why)
}

func (a *Arm) observe(r memberstate.Result) plan.ForceArmInput {
	o := r.Observation
	in := plan.ForceArmInput{Now: a.c.Now(), MajorityLost: r.Verdict.MajorityLost, MemberID: o.Local.ID, ClusterID: o.ClusterID, Held: a.held}
	if in.ClusterID == 0 {
		in.ClusterID = o.PinnedClusterID
	}
	if a.held && a.leaseFor != 0 {
		in.ClusterID = a.leaseFor // the cluster whose Lease is held, while it is
	}
	if m, ok := o.Member(o.Local.ID); ok && o.Local.ID != 0 {
		in.Voter = !m.IsLearner
	}
	if req, ok, err := memberruntime.ReadForceRequest(a.c.StateDir); err != nil {
		in.RequestErr = err.Error()
	} else if ok {
		in.Request = &req
	}
	live, err := memberruntime.ReadForceArm(a.c.StateDir)
	if err != nil { // the gate takes an unreadable mark as none; set aside, it is kept for a person
		a.c.Log.Warn("the --force-new-cluster arm mark cannot be read; set aside", zap.Error(err))
		_ = memberruntime.SetForceArmAside(a.c.StateDir)
	}
	aside, _ := memberruntime.ReadForceArmAside(a.c.StateDir)
	switch {
	case live != nil:
		a.mark, a.live = live, true
	case aside != nil && (a.mark == nil || !a.live || aside.Until.After(a.mark.Until)):
		a.mark, a.live = aside, false
	default:
		a.live = false // the disk has no live mark: the gate reads none
	}
	in.Mark, in.Live = a.mark, a.live
	if a.mark != nil {
		in.UsedAt = memberruntime.ForceRequestUsedAt(a.c.StateDir, *a.mark)
	}
	if in.Request == nil && in.RequestErr == "" && in.Mark == nil {
		return in // nothing asked: the common case, three stats
	}
	if j, ok, err := journal.Load(a.c.StateDir, a.c.Member); err != nil || (ok && j.Active()) {
		in.JournalOpen = true // an unreadable journal may be an open one
	}
	return in
}

// arm takes the Lease, fences on it for ValidFor and writes the mark: the
// gate may use the request until the mark's Until, and no other agent can
// take the Lease before then.
func (a *Arm) arm(ctx context.Context, in plan.ForceArmInput, d plan.ForceArmDecision) {
	l, err := a.leaseOf(in.ClusterID)
	a.lostHold(l)
	if err == nil && !a.held {
		err = l.TryAcquire(ctx, lease.Info{Target: a.c.Member, Phase: Phase, StartedAt: in.Request.RequestedAt})
		a.held = err == nil
	}
	start := a.c.Now() // the mark's time runs from before the fence
	if err == nil {
		err = l.ConfirmFor(ctx, a.c.ValidFor)
	}
	if err != nil {
		why := fmt.Sprintf("the cluster's recovery Lease %s is not this agent's: %v", lease.Name(in.ClusterID), err)
		if errors.Is(err, lease.ErrHeldByOther) && l != nil {
			if holder, info, _, cerr := l.Current(ctx); cerr == nil { // no times: the word changes only with the holder
				why = fmt.Sprintf("the cluster's recovery Lease %s is held by %q (phase %q)", lease.Name(in.ClusterID), holder, info.Phase)
			}
		}
		if errors.Is(err, lease.ErrAPIUnavailable) && in.Live && !in.Now.After(in.Mark.Until) {
			a.say(why + " (the mark stands until its time)") // its fence still stands
			return
		}
		if in.Live {
			if err := memberruntime.SetForceArmAside(a.c.StateDir); err == nil {
				a.live = false
			}
		}
		if in.Mark == nil && a.held { // no mark was written under this take
			a.release(ctx, in.ClusterID)
		}
		a.say(why)
		return
	}
	mark := plan.ForceArm{MemberID: in.Request.MemberID, RequestedAt: in.Request.RequestedAt, Holder: a.c.Holder, Until: start.Add(a.c.ValidFor)}
	a.mark, a.live = &mark, true // remembered before the write: a failed write may have left it
	if err := memberruntime.WriteForceArm(a.c.StateDir, mark); err != nil {
		a.say("the arm mark cannot be written: " + err.Error())
		return
	}
	if a.lastWhy != "armed" {
		a.lastWhy = "armed"
		a.c.Log.Warn("a person's --force-new-cluster request is armed: this agent holds the cluster's recovery Lease for it; the gate uses it at the member's next start",
			zap.String("lease", lease.Name(in.ClusterID)), zap.String("why", d.Why))
	}
}

// keep keeps the Lease (the renewer renews it); a restarted agent takes up
// its own hold again.
func (a *Arm) keep(ctx context.Context, in plan.ForceArmInput, why string) {
	l, err := a.leaseOf(in.ClusterID)
	a.lostHold(l)
	if err == nil && !a.held {
		err = l.TryAcquire(ctx, lease.Info{Target: a.c.Member, Phase: Phase, StartedAt: in.Mark.RequestedAt})
		a.held = err == nil
	}
	if err != nil && a.lastKeepErr != err.Error() {
		a.lastKeepErr = err.Error()
		a.c.Log.Warn("the cluster's recovery Lease cannot be kept", zap.String("why", why), zap.Error(err))
	}
}

// lostHold forgets a hold the renewer lost (the Lease deleted by a
// person, or taken after the API was gone longer than its TTL): the next
// take starts afresh.
func (a *Arm) lostHold(l Lease) {
	if a.held && l != nil && !l.Holding() {
		a.c.Log.Warn("the --force-new-cluster arm lost its hold on the cluster's recovery Lease; taking it again")
		a.held = false
	}
}

// release removes the marks and lets go of the Lease: this process's hold,
// or one an earlier run of this agent left under the arm's name.
func (a *Arm) release(ctx context.Context, clusterID uint64) {
	if err := memberruntime.RemoveForceArm(a.c.StateDir); err != nil {
		a.c.Log.Warn("the --force-new-cluster arm marks cannot be removed (the gate takes them as none: their time is over)", zap.Error(err))
	}
	a.mark, a.live = nil, false
	l, err := a.leaseOf(clusterID)
	if err != nil {
		return
	}
	if !a.held {
		holder, _, _, err := l.Current(ctx)
		if err != nil || holder != a.c.Holder {
			return
		}
		if l.TryAcquire(ctx, lease.Info{Target: a.c.Member, Phase: Phase}) != nil {
			return
		}
	}
	a.held = false
	if err := l.Release(ctx); err != nil {
		a.c.Log.Warn("the recovery Lease was not released (it expires on its own)", zap.Error(err))
		return
	}
	a.c.Log.Info("the --force-new-cluster arm let go of the cluster's recovery Lease", zap.String("lease", lease.Name(clusterID)))
}

// say writes why a request waits unarmed beside it (when that changes),
// and logs it.
func (a *Arm) say(why string) {
	if why == a.lastWhy {
		return
	}
	if err := memberruntime.SayNotArmed(a.c.StateDir, why); err != nil {
		a.c.Log.Warn("cannot say why the --force-new-cluster request waits", zap.Error(err))
	}
	if why != "" {
		a.c.Log.Info("a --force-new-cluster request is not armed", zap.String("why", why))
	}
	a.lastWhy = why
}

func (a *Arm) leaseOf(clusterID uint64) (Lease, error) {
	if a.c.NewLease == nil {
		return nil, errors.New("no Kubernetes API configured")
	}
	if clusterID == 0 {
		return nil, errors.New("cluster ID unknown")
	}
	if a.lease != nil && a.leaseFor == clusterID {
		return a.lease, nil
	}
	if a.held {
		return nil, fmt.Errorf("the recovery Lease of cluster %x is held; not switching to cluster %x", a.leaseFor, clusterID)
	}
	l, err := a.c.NewLease(clusterID)
	if err != nil {
		return nil, err
	}
	a.lease, a.leaseFor = l, clusterID
	return l, nil
}
