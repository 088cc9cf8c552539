// Package faststop is the start gate's stop watch: a small process the gate
// leaves beside etcd (its child once the gate has exec'd etcd) that ends a
// stopping etcd early when its graceful wait can save nothing (the rule is
// plan.DecideFastStop: a data dir without a db, not the leader, no unary
// request in flight). It never starts a stop: it only shortens one that the
// kubelet (or the lab's) began with SIGTERM.
//
// It ends etcd with SIGHUP, which etcd does not handle: the Go runtime then
// exits the process at once (os/signal: "A SIGHUP, SIGINT, or SIGTERM signal
// causes the program to exit"), also when etcd is PID 1 of its container,
// where a SIGKILL from inside the PID namespace would be dropped.
package faststop

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// Config is one stop watch.
type Config struct {
	// ParentPID is etcd's PID: the gate's own, which etcd keeps after the
	// exec. The watch ends once its parent is another process.
	ParentPID  int
	ClientURL  string // etcd's client URL (the watch's connection, the refusal probe)
	MetricsURL string // etcd's --listen-metrics-urls (http, or https with TLS)
	DataDir    string
	TLS        *tls.Config // etcd's client TLS (nil: plain)
	// Poll paces the looks (default 100 ms).
	Poll time.Duration
	Log  *zap.Logger
}

// looker takes one look at etcd; prober is the real one.
type looker interface {
	look(ctx context.Context) plan.FastStopFacts
	close()
}

// process is etcd's process as the watch sees it.
type process interface {
	// parent is the watch's parent PID now (os.Getppid).
	parent() int
	// end ends pid at once (SIGHUP).
	end(pid int) error
}

type osProcess struct{}

func (osProcess) parent() int { return os.Getppid() }
func (osProcess) end(pid int) error {
	return syscall.Kill(pid, syscall.SIGHUP)
}

// endWait bounds how long the watch waits, after ending etcd, for it to go
// (only for its log line: it exits either way).
const endWait = 5 * time.Second

// Watch watches etcd until it exits, and ends it early when
// plan.DecideFastStop says so. Bounded by etcd's life (and ctx).
func Watch(ctx context.Context, c Config) error {
	if c.ParentPID <= 1 || c.ClientURL == "" || c.MetricsURL == "" || c.DataDir == "" {
		return errors.New("stop watch: --parent-pid, --client-url, --metrics-url and --data-dir are required")
	}
	p, err := newProber(c)
	if err != nil {
		return err
	}
	return watch(ctx, c, p, osProcess{})
}

func watch(ctx context.Context, c Config, l looker, proc process) error {
	defer l.close()
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	if c.Poll <= 0 {
		c.Poll = 100 * time.Millisecond
	}
	log := c.Log.With(zap.Int("etcdPID", c.ParentPID), zap.String("dataDir", c.DataDir))
	log.Info("stop watch: watching etcd (a stop of a member whose data dir holds no db ends without etcd's graceful wait)")
	tick := time.NewTicker(c.Poll)
	defer tick.Stop()
	var lastWhy plan.Reason
	var stoppingSince time.Time
	for {
		if proc.parent() != c.ParentPID {
			log.Info("stop watch: etcd has exited; the watch ends")
			return nil
		}
		f := l.look(ctx)
		kill, why, detail := plan.DecideFastStop(f)
		if f.Drained && f.ClientRefused && stoppingSince.IsZero() {
			stoppingSince = time.Now()
		}
		if why != lastWhy && !stoppingSince.IsZero() {
			// Only once etcd is stopping: a serving etcd is not news.
			log.Info("stop watch: etcd is stopping", zap.String("verdict", string(why)), zap.String("detail", detail))
			lastWhy = why
		}
		if kill {
			if proc.parent() != c.ParentPID {
				return nil // gone meanwhile: nothing to end
			}
			if err := proc.end(c.ParentPID); err != nil {
				return fmt.Errorf("stop watch: end etcd (pid %d): %w", c.ParentPID, err)
			}
			log.Info("stop watch: etcd ended without its graceful wait (SIGHUP): nothing to flush, no request in flight",
				zap.Duration("stoppingFor", time.Since(stoppingSince)))
			waitGone(ctx, c, proc, log)
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// waitGone waits, bounded, until etcd has exited.
func waitGone(ctx context.Context, c Config, proc process, log *zap.Logger) {
	deadline := time.Now().Add(endWait)
	for proc.parent() == c.ParentPID {
		if time.Now().After(deadline) || ctx.Err() != nil {
			log.Warn("stop watch: etcd has not exited after SIGHUP; its own stop goes on", zap.Duration("waited", endWait))
			return
		}
		time.Sleep(c.Poll)
	}
}

// dbOnDisk: the data dir holds a db (or cannot be read: assume it does).
func dbOnDisk(dataDir string) bool {
	_, err := os.Stat(filepath.Join(dataDir, "member", "snap", "db"))
	return !errors.Is(err, fs.ErrNotExist)
}
