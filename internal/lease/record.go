package lease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
)

// maxConflicts bounds the re-read-and-retry loop when another agent writes
// the Lease between our read and our write (or creates it first).
const maxConflicts = 3

// conflictBackoff: client-go's retry on conflict, maxConflicts tries.
var conflictBackoff = wait.Backoff{Steps: maxConflicts, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1}

// write is the one read-modify-write path for acquiring, renewing and
// publishing a phase: it reads the Lease and writes it back as ours with
// info. mayTake allows taking a free or expired Lease (TryAcquire); without
// it the Lease must already name us (renewal, SetPhase).
func (l *Lease) write(ctx context.Context, info Info, mayTake bool) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	return l.writeLocked(ctx, info, mayTake)
}

func (l *Lease) writeLocked(ctx context.Context, info Info, mayTake bool) error {
	err := retry.OnError(conflictBackoff, isConflict, func() error {
		err := l.writeOnce(ctx, info, mayTake)
		if isConflict(err) {
			l.cfg.Log.Debug("lease changed under us; re-reading", zap.Error(err))
		}
		return err
	})
	if isConflict(err) {
		return fmt.Errorf("lease %s changed concurrently %d times in a row: %w", l.describe(), maxConflicts, err)
	}
	return err
}

func (l *Lease) writeOnce(ctx context.Context, info Info, mayTake bool) error {
	ctx, cancel := context.WithTimeout(ctx, l.requestTimeout())
	defer cancel()
	now := l.cfg.Now()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: l.cfg.Holder, LeaseDurationSeconds: ttlSeconds(l.cfg.TTL),
		AcquireTime: metav1.NewTime(now), RenewTime: metav1.NewTime(now)}
	rec, raw, err := l.lock.Get(ctx)
	switch {
	case isNotFound(err):
		if !mayTake {
			return fmt.Errorf("%w: lease %s no longer exists", ErrNotHeld, l.describe())
		}
		l.leases.annotations = info.annotations()
		err = l.lock.Create(ctx, mine)
	case err != nil:
		return l.apiError("read", err)
	default:
		// Judged at a time read after the record was: a first look must
		// never be dated before the read (a slow Get would hasten a
		// takeover by its duration). now, read before, stays the renewal's.
		st := l.stateOf(rec, raw, l.cfg.Now())
		switch {
		case st.Holder == l.cfg.Holder:
			mine.AcquireTime, mine.LeaderTransitions = rec.AcquireTime, rec.LeaderTransitions
		case mayTake && (st.Holder == "" || st.Expired):
			if st.Holder != "" {
				l.cfg.Log.Warn("taking over an expired recovery lease; the new holder must resume from etcd's actual membership",
					zap.String("previousHolder", st.Holder), zap.String("previousPhase", st.Info.Phase),
					zap.Time("expiredAt", st.ExpiresAt))
			}
			mine.LeaderTransitions = rec.LeaderTransitions + 1
		case mayTake:
			return fmt.Errorf("%w: %s", ErrHeldByOther, st.describe(l.describe()))
		default:
			return fmt.Errorf("%w: %s", ErrNotHeld, st.describe(l.describe()))
		}
		l.leases.annotations = info.annotations()
		err = l.lock.Update(ctx, mine)
	}
	if err != nil {
		if isConflict(err) {
			return err
		}
		return l.apiError("write", err)
	}
	l.info = info
	l.stateMu.Lock()
	if mayTake {
		l.held = true
	}
	l.renewedAt = now
	l.stateMu.Unlock()
	return nil
}

// clear frees the Lease if it names us.
func (l *Lease) clear(ctx context.Context) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	err := retry.OnError(conflictBackoff, isConflict, func() error {
		rctx, cancel := context.WithTimeout(ctx, l.requestTimeout())
		defer cancel()
		rec, _, err := l.lock.Get(rctx)
		if err == nil && rec.HolderIdentity == l.cfg.Holder {
			freed := *rec
			freed.HolderIdentity, freed.RenewTime = "", metav1.NewTime(l.cfg.Now())
			l.leases.annotations = nil
			err = l.lock.Update(rctx, freed)
		}
		return err
	})
	switch {
	case err == nil:
		l.info = Info{}
		return nil
	case isNotFound(err):
		return nil
	case isConflict(err):
		return fmt.Errorf("release lease %s: it changed concurrently %d times in a row", l.describe(), maxConflicts)
	}
	return l.apiError("release", err)
}

// leaseState is a Lease as read at a point in time.
type leaseState struct {
	Holder    string
	Info      Info
	RenewedAt time.Time
	ExpiresAt time.Time
	Expired   bool
}

// stateOf judges a record just read (raw: its bytes as read; opMu held).
// Expiry never compares another node's clock with ours (renewTime is the
// holder's wall clock): as in client-go's leader election, a hold that is
// not ours expires once this process has seen the very same record, unchanged,
// for its whole duration on its own clock; our own hold expires a TTL after
// our last successful write was sent, by our own clock. So a skewed clock,
// ours or the holder's, can delay a takeover, never hasten it.
func (l *Lease) stateOf(rec *resourcelock.LeaderElectionRecord, raw []byte, now time.Time) leaseState {
	st := leaseState{Holder: rec.HolderIdentity, Info: infoFrom(l.leases.last), RenewedAt: rec.RenewTime.Time}
	dur := time.Duration(rec.LeaseDurationSeconds) * time.Second
	if rec.HolderIdentity == l.cfg.Holder && l.acquiredHere() {
		l.stateMu.Lock()
		st.ExpiresAt = l.renewedAt.Add(l.cfg.TTL)
		l.stateMu.Unlock()
	} else {
		if !bytes.Equal(raw, l.seenRaw) {
			l.seenRaw, l.seenAt = slices.Clone(raw), now
		}
		st.ExpiresAt = l.seenAt.Add(dur)
	}
	st.Expired = rec.HolderIdentity == "" || !now.Before(st.ExpiresAt)
	return st
}

func (st leaseState) describe(lease string) string {
	if st.Holder == "" {
		return fmt.Sprintf("lease %s is free", lease)
	}
	s := fmt.Sprintf("lease %s is held by %q (target %q, phase %q", lease, st.Holder, st.Info.Target, st.Info.Phase)
	if !st.Info.StartedAt.IsZero() {
		s += ", started " + st.Info.StartedAt.Format(time.RFC3339)
	}
	if st.Expired {
		return s + fmt.Sprintf(", expired at %s)", st.ExpiresAt.Format(time.RFC3339))
	}
	return s + fmt.Sprintf(", valid until %s)", st.ExpiresAt.Format(time.RFC3339))
}

func (i Info) annotations() map[string]string {
	a := map[string]string{}
	for k, v := range map[string]string{AnnotationTargetMember: i.Target, AnnotationPhase: i.Phase} {
		if v != "" {
			a[k] = v
		}
	}
	if !i.StartedAt.IsZero() {
		a[AnnotationStartedAt] = i.StartedAt.UTC().Format(time.RFC3339)
	}
	return a
}

func infoFrom(a map[string]string) Info {
	i := Info{Target: a[AnnotationTargetMember], Phase: a[AnnotationPhase]}
	// A hand-edited, unparsable start time only loses the start time.
	i.StartedAt, _ = time.Parse(time.RFC3339, a[AnnotationStartedAt])
	return i
}

// annotatingLeases lets resourcelock.LeaseLock, which only knows the Lease
// spec, carry our annotations: it sets them on every Create and Update and
// remembers the annotations of the last Lease read or written. Only used
// under Lease.opMu.
type annotatingLeases struct {
	getter      coordinationv1client.LeasesGetter
	annotations map[string]string // ours for the next write; our keys absent here are removed
	last        map[string]string
}

func (a *annotatingLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return annotatingLeaseClient{LeaseInterface: a.getter.Leases(namespace), a: a}
}

type annotatingLeaseClient struct {
	coordinationv1client.LeaseInterface
	a *annotatingLeases
}

func (c annotatingLeaseClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	return c.remember(c.LeaseInterface.Get(ctx, name, opts))
}

func (c annotatingLeaseClient) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return c.remember(c.LeaseInterface.Create(ctx, c.annotate(lease), opts))
}

func (c annotatingLeaseClient) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return c.remember(c.LeaseInterface.Update(ctx, c.annotate(lease), opts))
}

// annotate returns a copy: LeaseLock keeps the object it passed in.
func (c annotatingLeaseClient) annotate(lease *coordinationv1.Lease) *coordinationv1.Lease {
	lease = lease.DeepCopy()
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	for _, k := range []string{AnnotationTargetMember, AnnotationPhase, AnnotationStartedAt} {
		delete(lease.Annotations, k)
	}
	for k, v := range c.a.annotations {
		lease.Annotations[k] = v
	}
	return lease
}

func (c annotatingLeaseClient) remember(lease *coordinationv1.Lease, err error) (*coordinationv1.Lease, error) {
	if err == nil {
		c.a.last = lease.Annotations
	}
	return lease, err
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// isConflict covers both races: an Update that lost to another writer and a
// Create that lost to another creator.
func isConflict(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }

// apiError wraps err, marking it ErrAPIUnavailable when the API server could
// not be reached or could not answer, so callers can refuse with reason
// api-unavailable rather than report a bug.
func (l *Lease) apiError(op string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("%w: %s lease %s: %w", ErrAPIUnavailable, op, l.describe(), err)
	}
	return fmt.Errorf("%s lease %s: %w", op, l.describe(), err)
}

func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // transport errors: refused, reset, TLS, DNS, timeouts
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

func leaseMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
