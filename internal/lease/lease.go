// Package lease is the cluster-wide recovery lock: one coordination.k8s.io/v1
// Lease per etcd cluster, so that at most one agent changes etcd membership
// at a time (docs/design.md §5).
//
// The holder publishes what it is doing as annotations on the Lease, so
// `kubectl get lease -o yaml` shows who heals which member and how far it
// got. Reads and writes go through client-go's resourcelock.LeaseLock, whose
// Update carries the resourceVersion it last read: two agents racing for the
// Lease cannot both win, the loser gets a Conflict and re-reads.
//
// A holder that stops renewing (crashed, partitioned) loses the Lease once
// another agent has watched its record unchanged for leaseDurationSeconds
// on its own clock (never by comparing the holder's renewTime with its own
// clock: skewed clocks then delay a takeover, never hasten it); that agent
// may then take it over and must resume or roll back from etcd's actual
// membership, not from the old holder's memory. Confirm is the fence a holder checks before each
// membership change.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Annotations the holder writes on the Lease.
const (
	AnnotationTargetMember = "etcd-agent.io/target-member"
	AnnotationPhase        = "etcd-agent.io/phase"
	AnnotationStartedAt    = "etcd-agent.io/started-at"
)

// DefaultTTL is how long a Lease stays valid without renewal.
const DefaultTTL = 30 * time.Second

// Sentinel errors; match them with errors.Is. The wrapped message says who
// holds the Lease or why the API could not be used.
var (
	ErrHeldByOther    = errors.New("recovery lease is held by another agent")
	ErrNotHeld        = errors.New("recovery lease is not held by this agent")
	ErrAPIUnavailable = errors.New("kubernetes API unavailable")
)

// Info is what the holder publishes on the Lease.
type Info struct {
	Target    string    // the etcd member being healed
	Phase     string    // the current step of the recovery
	StartedAt time.Time // when the recovery started
}

// Config configures New.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string        // see Name(clusterID)
	Holder    string        // "<node>/<member>"; unique per agent and member
	TTL       time.Duration // default DefaultTTL; whole seconds (rounded up)
	Log       *zap.Logger
	Now       func() time.Time // default time.Now
}

// Name is the Lease name for the etcd cluster with the given ID.
func Name(clusterID uint64) string { return fmt.Sprintf("etcd-agent-recovery-%x", clusterID) }

// Lease is one agent's handle on the recovery Lease. Its methods are safe
// for concurrent use.
type Lease struct {
	cfg    Config
	lock   *resourcelock.LeaseLock
	leases *annotatingLeases

	// opMu serialises read-modify-write cycles: LeaseLock remembers the
	// object of its last Get, and its Update sends that object's
	// resourceVersion.
	opMu sync.Mutex
	info Info // guarded by opMu

	// seenRaw is the last record read of another holder's hold, seenAt
	// when this process first saw it so (opMu): see stateOf.
	seenRaw []byte
	seenAt  time.Time

	stateMu   sync.Mutex
	held      bool
	renewedAt time.Time // renewTime of our last successful write
	stopRenew context.CancelFunc
	renewDone chan struct{}
}

// New checks cfg and returns a Lease handle; it does not contact the API.
func New(cfg Config) (*Lease, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("lease: Client is required")
	case cfg.Namespace == "" || cfg.Name == "":
		return nil, errors.New("lease: Namespace and Name are required")
	case cfg.Holder == "":
		return nil, errors.New(`lease: Holder ("<node>/<member>") is required`)
	case cfg.TTL < 0:
		return nil, fmt.Errorf("lease: TTL must be positive, got %s", cfg.TTL)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	// leaseDurationSeconds is an integer; round up so that we never promise
	// others a shorter hold than we renew for.
	cfg.TTL = time.Duration(ttlSeconds(cfg.TTL)) * time.Second
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Log = cfg.Log.With(zap.String("lease", cfg.Namespace+"/"+cfg.Name), zap.String("holder", cfg.Holder))
	leases := &annotatingLeases{getter: cfg.Client.CoordinationV1()}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  leaseMeta(cfg.Namespace, cfg.Name),
		Client:     leases,
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Holder},
	}
	return &Lease{cfg: cfg, lock: lock, leases: leases}, nil
}

func ttlSeconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// TryAcquire takes the Lease if it is free, expired or already ours (an agent
// restarted mid-recovery resumes its own hold), publishes info and starts
// renewing it every TTL/3 until Release or until a renewal finds it taken.
// It returns ErrHeldByOther naming the holder and its phase, or
// ErrAPIUnavailable when the API server cannot be reached.
func (l *Lease) TryAcquire(ctx context.Context, info Info) error {
	if info.StartedAt.IsZero() {
		info.StartedAt = l.cfg.Now()
	}
	if err := l.write(ctx, info, true); err != nil {
		return err
	}
	l.startRenewer(ctx)
	l.cfg.Log.Info("recovery lease acquired", zap.String("target", info.Target), zap.String("phase", info.Phase))
	return nil
}

// SetPhase publishes the recovery's new phase and renews the Lease.
func (l *Lease) SetPhase(ctx context.Context, phase string) error {
	if !l.acquiredHere() {
		return fmt.Errorf("%w: set phase %q: call TryAcquire first", ErrNotHeld, phase)
	}
	l.opMu.Lock()
	info := l.info
	l.opMu.Unlock()
	info.Phase = phase
	return l.write(ctx, info, false)
}

// Confirm is the fence before each membership change: it re-reads the Lease
// from the API server (never a cache) and returns nil only if this agent
// acquired it, still holds it and it has not expired. Anything else means
// another agent may be acting, and the caller must stop.
func (l *Lease) Confirm(ctx context.Context) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	_, err := l.confirmLocked(ctx)
	return err
}

// ConfirmFor is the fence before a destructive step that may take up to
// need (its own timeout): as Confirm, and the hold must also last longer
// than need from now, so that no other agent can take the Lease before the
// step has ended. With less left (the renewer runs every TTL/3, so up to a
// third of the TTL is gone), it renews the Lease first (a write under the
// Lease's resourceVersion, as SetPhase does: it fails if anyone else holds
// it) and confirms again. A step of TTL or more can never be fenced and is
// refused. Errors wrap ErrNotHeld (stop and re-decide) or ErrAPIUnavailable.
//
// The caller starts the step's deadline before calling ConfirmFor, so the
// step ends before now+need < the hold's expiry.
func (l *Lease) ConfirmFor(ctx context.Context, need time.Duration) error {
	if need >= l.cfg.TTL {
		return fmt.Errorf("lease %s: a step of %s cannot be fenced by a %s Lease (--lease-ttl must be longer than every step's timeout)",
			l.describe(), need, l.cfg.TTL)
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	st, err := l.confirmLocked(ctx)
	if err != nil {
		return err
	}
	if st.ExpiresAt.Sub(l.cfg.Now()) > need {
		return nil
	}
	if err := l.writeLocked(ctx, l.info, false); err != nil {
		return fmt.Errorf("renew before a step of %s: %w", need, err)
	}
	if st, err = l.confirmLocked(ctx); err != nil {
		return err
	}
	if left := st.ExpiresAt.Sub(l.cfg.Now()); left <= need {
		return fmt.Errorf("%w: lease %s has %s left after a renewal, the step needs %s", ErrNotHeld, l.describe(), left.Round(time.Millisecond), need)
	}
	return nil
}

// confirmLocked reads the Lease (opMu held) and checks that this process
// holds it, unexpired.
func (l *Lease) confirmLocked(ctx context.Context) (leaseState, error) {
	ctx, cancel := context.WithTimeout(ctx, l.requestTimeout())
	defer cancel()
	rec, raw, err := l.lock.Get(ctx)
	if err != nil {
		if isNotFound(err) {
			return leaseState{}, fmt.Errorf("%w: lease %s does not exist", ErrNotHeld, l.describe())
		}
		return leaseState{}, l.apiError("read", err)
	}
	st := l.stateOf(rec, raw, l.cfg.Now())
	switch {
	case st.Holder != l.cfg.Holder:
		return st, fmt.Errorf("%w: %s", ErrNotHeld, st.describe(l.describe()))
	case st.Expired:
		return st, fmt.Errorf("%w: our hold on lease %s expired at %s", ErrNotHeld, l.describe(), st.ExpiresAt.Format(time.RFC3339Nano))
	case !l.acquiredHere():
		// Our identity, but from an earlier run of this agent or a hold
		// this process already saw taken: not a fence this process passed.
		return st, fmt.Errorf("%w: lease %s names us but was not acquired by this process; call TryAcquire", ErrNotHeld, l.describe())
	}
	return st, nil
}

// Release stops renewing and clears holderIdentity and our annotations, so
// another agent can take the Lease at once instead of waiting for it to
// expire. It is idempotent, and leaves a Lease held by someone else alone.
func (l *Lease) Release(ctx context.Context) error {
	l.stopRenewer()
	l.stateMu.Lock()
	l.held = false
	l.stateMu.Unlock()
	return l.clear(ctx)
}

// Abandon stops renewing without releasing, as a holder that died would:
// the hold ends when the Lease expires, unless a later handle under the
// same holder name takes it up again (TryAcquire resumes its own hold).
// For a loop that ends while a step it started may still count on the
// Lease (a gate about to use an armed request).
func (l *Lease) Abandon() { l.stopRenewer() }

// Holding reports whether this agent holds the Lease as far as it knows: it
// acquired it, no renewal has found it taken, and the last successful
// renewal is younger than the TTL (after that, others may take it over).
func (l *Lease) Holding() bool {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	return l.held && l.cfg.Now().Before(l.renewedAt.Add(l.cfg.TTL))
}

// Current reads the Lease for status and `recover --dry-run`. holder is ""
// when the Lease is free or does not exist; expired is true when its holder
// stopped renewing it in time.
func (l *Lease) Current(ctx context.Context) (holder string, info Info, expired bool, err error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.requestTimeout())
	defer cancel()
	rec, raw, err := l.lock.Get(ctx)
	if err != nil {
		if isNotFound(err) {
			return "", Info{}, false, nil
		}
		return "", Info{}, false, l.apiError("read", err)
	}
	st := l.stateOf(rec, raw, l.cfg.Now())
	return st.Holder, st.Info, st.Holder != "" && st.Expired, nil
}

// acquiredHere reports whether TryAcquire succeeded in this process and no
// renewal has found the Lease taken since. A Lease left by an earlier run of
// the same agent must be taken again with TryAcquire, which also restarts
// the renewer.
func (l *Lease) acquiredHere() bool {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	return l.held
}

func (l *Lease) describe() string { return l.cfg.Namespace + "/" + l.cfg.Name }

// requestTimeout bounds each API call, so that a hung API server cannot
// hold a renewal past the Lease's expiry.
func (l *Lease) requestTimeout() time.Duration { return max(l.cfg.TTL/3, 2*time.Second) }
