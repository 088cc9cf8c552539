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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Config is one stop watch.
type Config struct {
	// ParentPID is etcd's PID: the gate's own, which etcd keeps after the
	// exec. The watch ends once its parent is another process.
	ParentPID int
	ClientURL string // etcd's client URL (the watch's own gRPC connection)
	// ListenURLs are every URL etcd listens on for clients (wildcards as
	// loopback): etcd is shutting down only when all of them refuse.
	ListenURLs []string
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

// osProcess signals etcd through a pidfd opened while etcd was the
// watch's parent: a PID reused after etcd exited is never signalled.
type osProcess struct{ pidfd int }

func newOSProcess(pid int) (*osProcess, error) {
	if os.Getppid() != pid {
		return nil, fmt.Errorf("etcd (pid %d) is not this process's parent (%d)", pid, os.Getppid())
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd of etcd (pid %d): %w", pid, err)
	}
	if os.Getppid() != pid {
		unix.Close(fd)
		return nil, fmt.Errorf("etcd (pid %d) exited while the watch started", pid)
	}
	if ignored, err := ignoresSIGHUP(pid); err != nil || ignored {
		unix.Close(fd)
		return nil, fmt.Errorf("etcd ignores SIGHUP (started under nohup?), or its signal mask cannot be read (%v): it cannot be ended early", err)
	}
	return &osProcess{pidfd: fd}, nil
}

func (osProcess) parent() int { return os.Getppid() }
func (p osProcess) end(int) error {
	return unix.PidfdSendSignal(p.pidfd, syscall.SIGHUP, nil, 0)
}

// ignoresSIGHUP reads pid's ignored signals (/proc/<pid>/status, SigIgn):
// an ignored SIGHUP survives exec, and Go then leaves it ignored.
func ignoresSIGHUP(pid int) (bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hexMask, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hexMask), 16, 64)
			if err != nil {
				return false, err
			}
			return mask&(1<<(uint(syscall.SIGHUP)-1)) != 0, nil
		}
	}
	return false, errors.New("no SigIgn line")
}

// notReadyAfter: a watch whose connection to etcd is not ready by then
// says so (a TLS setup the gate lacks, etcd not serving yet).
const notReadyAfter = 30 * time.Second

// endWait bounds how long the watch waits, after ending etcd, for it to go
// (only for its log line: it exits either way).
const endWait = 5 * time.Second

// Watch watches etcd until it exits, and ends it early when
// plan.DecideFastStop says so. Bounded by etcd's life (and ctx).
// A watch that cannot work says why once and idles until etcd exits: it
// is etcd's child, and a child that exits early stays a zombie under etcd
// (which reaps no child it did not start).
func Watch(ctx context.Context, c Config) error {
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	idle := func(err error) error {
		c.Log.Warn("stop watch: off; etcd's stops keep their graceful wait", zap.Error(err))
		for os.Getppid() == c.ParentPID && ctx.Err() == nil {
			time.Sleep(time.Second)
		}
		return nil
	}
	if c.ParentPID <= 0 || c.ClientURL == "" || len(c.ListenURLs) == 0 || c.MetricsURL == "" || c.DataDir == "" {
		return idle(errors.New("--parent-pid, --client-url, --listen-url, --metrics-url and --data-dir are required"))
	}
	proc, err := newOSProcess(c.ParentPID)
	if err != nil {
		return idle(err)
	}
	p, err := newProber(c)
	if err != nil {
		return idle(err)
	}
	return watch(ctx, c, p, proc)
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
	notReadyLogged, servedLogged, began := false, false, time.Now()
	for {
		if proc.parent() != c.ParentPID {
			log.Info("stop watch: etcd has exited; the watch ends")
			return nil
		}
		f := l.look(ctx)
		if f.Served && !servedLogged {
			log.Info("stop watch: connected to etcd")
			servedLogged = true
		}
		if !f.Served && !notReadyLogged && time.Since(began) > notReadyAfter {
			log.Warn("stop watch: its connection to etcd is not ready; until it is, etcd's stops keep their graceful wait", zap.String("clientURL", c.ClientURL))
			notReadyLogged = true
		}
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
