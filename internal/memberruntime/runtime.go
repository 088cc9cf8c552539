// Package memberruntime stops and starts the local etcd member: the only way
// the agent touches the member's process. Two runtimes exist (docs/design.md §6):
//
//   - static-pod: the kubelet runs etcd from a manifest in its manifests dir;
//     stopping parks that manifest in the agent's state dir, starting puts it
//     back with --initial-cluster-state=existing and --initial-cluster set.
//   - exec: user-given shell commands (e.g. systemctl stop/start etcd).
//
// Stop returns only once the process is really gone: its client URL refuses
// connections and nobody holds the bbolt lock of its db. Both matter: etcd
// closes its listeners before it closes the db, and the next step of a
// rejoin (quarantining the data dir) must not race a member still writing.
package memberruntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/netprobe"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Runtime stops and starts the local etcd member.
type Runtime interface {
	// Stop stops the local member and returns once its process is gone
	// (client URL refuses connections, db lock free). Idempotent. Bounded
	// by ctx.
	Stop(ctx context.Context) error
	// Start starts the member to join an existing cluster:
	// --initial-cluster-state=existing and --initial-cluster=initialCluster.
	// It does not wait for the member to serve (a new learner may take a
	// while to catch up; the caller waits for that). Idempotent.
	Start(ctx context.Context, initialCluster string) error
	// Stopped reports whether the runtime has the member stopped.
	Stopped() (bool, error)
	// Describe says which runtime this is and what it acts on, for logs
	// and `status`.
	Describe() string
}

// Retirer is a Runtime whose stopped member can be set aside for good (a
// member moved to another node; the static-pod runtime).
type Retirer interface {
	Retire(movedDir, suffix string) (string, error)
}

const (
	// pollInterval paces the "is the process gone" checks.
	pollInterval = 100 * time.Millisecond
	// goneSettle is how long "gone" must hold before Stop believes it: a
	// member that was crash-looping may be down at the first check yet be
	// restarted once more by a kubelet that has not yet seen the manifest
	// disappear.
	goneSettle = time.Second
	// dialTimeout bounds one connection attempt to the client URL.
	dialTimeout = 500 * time.Millisecond
)

// dbRelPath is where etcd keeps its bbolt db inside the data dir.
var dbRelPath = filepath.Join("member", "snap", "db")

// processState is one look at whether the member's process is still there.
type processState struct {
	listening bool // something accepted a connection on the client URL
	dbLocked  bool // someone holds the db's flock
	// lockUnknown: the data dir is not a directory, so its db lock cannot
	// be checked; the listen URLs alone decide.
	lockUnknown bool
	detail      string
}

func (s processState) gone() bool { return !s.listening && !s.dbLocked }

// probeProcess checks every URL the member listens on and, when dataDir is
// known, the db lock. The peer URL matters: etcd closes its client listener
// first on shutdown and keeps talking raft to its peers for seconds after,
// and with a wiped data dir there is no db lock left to tell. The error is
// a question that can never be answered (a URL that cannot be probed, a
// data dir that is not a directory with no URL to ask): waiting longer
// would not help. A data dir that is not a directory leaves the URLs to
// decide (issue 38): etcd keeps its peer listener open until it has ended.
func probeProcess(urls []string, dataDir string) (processState, error) {
	var st processState
	for _, u := range urls {
		refused, err := clientURLRefuses(u)
		var bad *unprobeableError
		switch {
		case errors.As(err, &bad):
			return st, err
		case err != nil:
			st.listening = true // unknown counts as "maybe still there"
			st.detail = joinDetail(st.detail, err.Error())
		case !refused:
			st.listening = true
			st.detail = joinDetail(st.detail, u+" accepts connections")
		}
	}
	if dataDir == "" {
		return st, nil
	}
	if fi, err := os.Stat(dataDir); err == nil && !fi.IsDir() {
		why := fmt.Sprintf("data dir %s is not a directory (%s): its db lock cannot be checked", dataDir, fi.Mode().Type())
		if len(urls) == 0 {
			return st, &unprobeableError{fmt.Errorf("%s, and there is no listen URL to ask", why)}
		}
		st.lockUnknown = true
		st.detail = joinDetail(st.detail, why)
		return st, nil
	}
	dbPath := filepath.Join(dataDir, dbRelPath)
	locked, err := dbLocked(dbPath)
	if err != nil {
		return st, &unprobeableError{err}
	} else if locked {
		st.dbLocked = true
		st.detail = joinDetail(st.detail, dbPath+" is locked by a process")
	}
	return st, nil
}

// unprobeableError: whether the process is gone can never be told this way.
type unprobeableError struct{ err error }

func (e *unprobeableError) Error() string { return e.err.Error() }
func (e *unprobeableError) Unwrap() error { return e.err }

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// clientURLRefuses dials the URL once. It reports refused=true only on a
// definite "nobody listens"; a timeout proves nothing and is returned as an
// error, a URL that cannot be probed as an unprobeableError.
func clientURLRefuses(clientURL string) (refused bool, err error) {
	_, refused, err = netprobe.Dial(clientURL, dialTimeout)
	if errors.Is(err, netprobe.ErrUnprobeable) {
		return false, &unprobeableError{err}
	}
	return refused, err
}

// dbLocked reports whether another process holds bbolt's flock on the db.
// It takes the flock directly, as bbolt does, rather than opening the db
// with bbolt: no page is read, so a damaged db cannot make this panic.
func dbLocked(dbPath string) (bool, error) {
	f, err := os.Open(dbPath)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", dbPath, err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("flock %s: %w", dbPath, err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false, nil
}

// waitLimits bound a wait inside a step: its own deadline, and how often it
// says, while it lasts, that it still waits.
type waitLimits struct{ timeout, every time.Duration }

// stopWait bounds Stop's wait for the process to go, by default. The
// kubelet notices a parked manifest within its file-check period (20 s) and
// then gives etcd its termination grace period (30 s by default); 3 minutes
// is well past both, and far short of the recovery timeout.
var stopWait = waitLimits{timeout: 3 * time.Minute, every: 10 * time.Second}

// Option configures a runtime.
type Option func(*waitLimits)

// StopTimeout sets how long Stop waits for etcd's process to go (0: the
// default, 3m); while it waits it logs every 10 s, or every third of d.
func StopTimeout(d time.Duration) Option {
	return func(w *waitLimits) {
		if d > 0 {
			w.timeout, w.every = d, min(10*time.Second, d/3)
		}
	}
}

func limits(opts []Option) waitLimits {
	w := stopWait
	for _, o := range opts {
		o(&w)
	}
	return w
}

// waitGone polls until the member's process has been gone for goneSettle,
// or its own deadline (lim) or ctx ends; it logs when it starts and every
// lim.every while it lasts. dataDir may be "" when unknown (only
// the client URL is checked then). A probe that can never answer is an
// error at once.
func waitGone(ctx context.Context, log *zap.Logger, lim waitLimits, urls []string, dataDir string) error {
	start := time.Now()
	var goneSince, logged time.Time
	var last processState
	saidURLsDecide := false
	log.Info("waiting for etcd to stop", zap.Strings("urls", urls), zap.String("dataDir", dataDir),
		zap.Duration("timeout", lim.timeout))
	err := wait.PollUntilContextTimeout(ctx, pollInterval, lim.timeout, true, func(context.Context) (bool, error) {
		st, err := probeProcess(urls, dataDir)
		if err != nil {
			return false, err
		}
		last = st
		if st.lockUnknown && !saidURLsDecide {
			saidURLsDecide = true
			log.Info("data dir is not a directory: its db lock cannot be checked; the listen URLs decide whether etcd stopped",
				zap.Strings("urls", urls), zap.String("dataDir", dataDir), zap.Bool("listening", st.listening), zap.String("detail", st.detail))
		}
		switch {
		case !st.gone():
			goneSince = time.Time{}
		case goneSince.IsZero():
			goneSince = time.Now()
		case time.Since(goneSince) >= goneSettle:
			return true, nil
		}
		if time.Since(start) >= lim.every && time.Since(logged) >= lim.every {
			logged = time.Now()
			log.Info("still waiting for etcd to stop", zap.Duration("waited", time.Since(start).Round(time.Millisecond)),
				zap.Duration("timeout", lim.timeout), zap.Bool("gone", st.gone()), zap.String("detail", st.detail))
		}
		return false, nil
	})
	var bad *unprobeableError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &bad):
		return fmt.Errorf("cannot tell whether etcd stopped: %w", err)
	case ctx.Err() == nil:
		// Our own deadline, not the caller's.
		err = fmt.Errorf("etcd did not stop within %s", lim.timeout)
	}
	if last.gone() {
		return fmt.Errorf("member process gone for less than %s (not yet trusted): %w", goneSettle, err)
	}
	return fmt.Errorf("member process still running: %s: %w", last.detail, err)
}

// ClientURLsSetter is a Runtime that can start a learner with its client
// URLs set aside (the static-pod runtime: it owns the member's flags). A
// 3.5 learner refuses client writes with Unavailable, which clients do not
// send to another member; set aside, no client reaches it until its
// promotion, and Start puts the URLs back (docs/recovery.md, "etcd
// versions").
type ClientURLsSetter interface {
	StartAside(ctx context.Context, initialCluster string) (private string, err error)
	ClientURLsAside() (private string, ok bool, err error)
	// CanSetClientURLsAside says why StartAside would fail (nil: it would
	// not), before any change is made on it.
	CanSetClientURLsAside() error
}
