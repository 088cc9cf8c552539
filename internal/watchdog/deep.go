package watchdog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"go.uber.org/zap"
)

// deepCheckWait bounds an observation's wait for the deep check it needs
// while Run polls (most checks take tens of milliseconds: a child process
// reads the db and the WAL). A longer one goes on in the background, the
// agent observing on with the layout verdict, unverified, meanwhile; the
// first observation after it ends takes its verdict. The check itself ends
// within localdisk's own deadline (its child is killed then).
const deepCheckWait = 3 * time.Second

// deepCache remembers the deep classification of a data dir while its files
// are unchanged: a stopped member's db can be large, and checking it every
// poll would cost a core. One check runs at a time, in the background.
type deepCache struct {
	// check is the deep check (localdisk.Classify; tests: a slow one).
	check func(context.Context, localdisk.Dirs, localdisk.Expect) localdisk.Result
	// wait is deepCheckWait (tests: shorter).
	wait time.Duration
	log  *zap.Logger
	// ctx ends the check in flight when the watchdog closes.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	key    string
	result localdisk.Result
	run    *deepRun // the check in flight, or ended and not taken yet
}

// deepRun is one deep check.
type deepRun struct {
	key, files string
	dir        localdisk.Dirs
	started    time.Time
	cancel     context.CancelFunc
	done       chan struct{} // closed once result is set
	result     localdisk.Result
	slow       bool // an observation went on without it (said once)
}

func newDeepCache(log *zap.Logger) deepCache {
	ctx, cancel := context.WithCancel(context.Background())
	return deepCache{check: localdisk.Classify, wait: deepCheckWait, log: log, ctx: ctx, cancel: cancel}
}

// close ends the check in flight.
func (c *deepCache) close() {
	if c.cancel != nil {
		c.cancel()
	}
}

// classify is the deep check of dir, from the cache while its files are
// unchanged. bounded (Run polls: a next observation comes) waits at most
// c.wait for a check, then returns layout, unverified, saying the check
// runs; a one-shot observation waits for it (the check is bounded by its
// own deadline) or for ctx.
func (c *deepCache) classify(ctx context.Context, dir localdisk.Dirs, exp localdisk.Expect, layout localdisk.Result, bounded bool) localdisk.Result {
	if ctx.Err() != nil {
		return c.check(ctx, dir, exp) // the layout's verdict, unverified, at once
	}
	files := fingerprint(dir)
	key := files + fmt.Sprintf("|%x|%x|%+v", exp.MemberID, exp.ClusterID, exp.HighWater)
	c.mu.Lock()
	if key == c.key {
		r := c.result
		c.mu.Unlock()
		return r
	}
	run := c.run
	if run == nil || run.key != key {
		if run != nil {
			run.cancel() // of other files: its verdict would be of neither
		}
		run = c.start(dir, exp, key, files)
	}
	wait := c.wait
	if run.slow {
		wait = 0 // said to be slow: the polls go on at their pace
	}
	c.mu.Unlock()
	var timeout <-chan time.Time
	if bounded {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-run.done:
		return c.take(run)
	case <-ctx.Done():
		layout.Verified = false
		layout.Detail = fmt.Sprintf("%s; deep check not finished: %v", layout.Detail, ctx.Err())
		return layout
	case <-timeout:
	}
	c.mu.Lock()
	if isDone(run.done) { // ended meanwhile: its end is not said (see start)
		c.mu.Unlock()
		return c.take(run)
	}
	defer c.mu.Unlock()
	running := time.Since(run.started).Round(time.Millisecond)
	if !run.slow {
		run.slow = true
		c.log.Warn("the data dir's deep check is taking long; observing on with its layout check alone (unverified) until it ends",
			zap.String("dataDir", dir.Data), zap.Duration("running", running))
	}
	layout.Verified = false
	layout.Detail = fmt.Sprintf("%s; deep check running for %s", layout.Detail, running)
	return layout
}

// start runs a check in the background (c.mu held).
func (c *deepCache) start(dir localdisk.Dirs, exp localdisk.Expect, key, files string) *deepRun {
	ctx, cancel := context.WithCancel(c.ctx)
	run := &deepRun{key: key, files: files, dir: dir, started: time.Now(), cancel: cancel, done: make(chan struct{})}
	c.run = run
	go func() {
		defer cancel()
		run.result = c.check(ctx, dir, exp)
		close(run.done)
		c.mu.Lock() // after the close: an observation that went on without it said so already
		slow := run.slow
		c.mu.Unlock()
		took := time.Since(run.started).Round(time.Millisecond)
		switch {
		case !slow || ctx.Err() != nil: // quick (taken by its observation), or ended by us
		case !run.result.Verified:
			c.log.Warn("the data dir's deep check ended without a verdict; checked again at the next observation",
				zap.String("dataDir", dir.Data), zap.Duration("took", took), zap.String("detail", run.result.Detail))
		default:
			c.log.Info("the data dir's deep check ended", zap.String("dataDir", dir.Data), zap.Duration("took", took),
				zap.String("class", string(run.result.Class)))
		}
	}()
	return run
}

// take is an ended check's verdict, kept while its files are unchanged.
func (c *deepCache) take(run *deepRun) localdisk.Result {
	r := run.result
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == run {
		c.run = nil
	}
	if r.Class == localdisk.ClassInUse || !r.Verified {
		return r // someone holds it now, or the check did not finish: again next time
	}
	if fingerprint(run.dir) != run.files {
		// The files moved during the check (a data dir renamed away and
		// back keeps its files' sizes and mtimes): the verdict may be of
		// neither state, so it is not remembered.
		return r
	}
	c.key, c.result = run.key, r
	return r
}

// fingerprint names the db, WAL and snapshot files (and the skeleton
// marker) by size and mtime.
func fingerprint(dir localdisk.Dirs) string {
	files, _ := filepath.Glob(filepath.Join(dir.WALDir(), "*.wal"))
	files = append(files, filepath.Join(dir.Data, "member", "snap", "db"))
	snaps, _ := filepath.Glob(filepath.Join(dir.Data, "member", "snap", "*.snap"))
	files = append(files, snaps...)
	// The agent's skeleton marker turns the same files into another class.
	files = append(files, localdisk.SkeletonMarker(dir.Data))
	out := ""
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			out += fmt.Sprintf("%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
		}
	}
	return out
}
