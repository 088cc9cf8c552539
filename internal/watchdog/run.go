package watchdog

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Run observes every poll interval, and at once when the data dir changes,
// calling onResult with each result, until ctx ends. Its polls are routine:
// they may reuse the other members' last probe (Config.PeerProbeEvery).
func (w *Watchdog) Run(ctx context.Context, onObservation func(observation.Observation)) error {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer fsw.Close()
	dir, walDir := w.cfg.Identity.DataDir, w.cfg.Identity.WALDir
	// The parent survives the data dir being removed and re-created; the dir
	// and its member/ subdir report a wipe of the member's files. A
	// dedicated WAL dir is watched the same way: a wipe of it is as urgent
	// (etcd's purge lists it every 30 s and ends the member when it is gone).
	watched := []string{filepath.Dir(dir), dir, filepath.Join(dir, "member")}
	if walDir != "" {
		watched = append(watched, filepath.Dir(walDir), walDir)
	}
	addWatches := func() {
		for _, p := range watched {
			_ = fsw.Add(p) // fails while p does not exist; re-added on the next event
		}
	}
	addWatches()
	trigger := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-fsw.Events:
				if !ok {
					return
				}
				if !relevant(ev.Name, dir) && (walDir == "" || !relevant(ev.Name, walDir) || !changesEntries(ev, walDir)) {
					continue
				}
				w.cfg.Log.Debug("data dir event", zap.String("path", ev.Name), zap.String("op", ev.Op.String()))
				addWatches()
				select {
				case trigger <- struct{}{}:
				default: // an observation is already due
				}
			case err, ok := <-fsw.Errors:
				if !ok {
					return
				}
				w.cfg.Log.Warn("data dir watch", zap.Error(err))
			}
		}
	}()
	w.running.Store(true)
	defer w.running.Store(false)
	tick := time.NewTimer(w.untilPoll(time.Now()))
	defer tick.Stop()
	wake := time.NewTimer(time.Hour)
	wake.Stop()
	defer wake.Stop()
	for {
		onObservation(w.observeTimed(ctx, time.Now(), true))
		wake.Stop()
		if d, ok := w.untilWake(time.Now()); ok {
			wake.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			tick.Reset(w.untilPoll(time.Now()))
		case <-wake.C: // a grace period ends: judged now, not at the next poll
		case <-trigger:
		case <-w.live.ended: // a member exited or lost its leader
		}
	}
}

// WakeAt asks Run (from its onObservation) for an observation at t, before
// the next poll: the end of a member's grace period, so that it is judged
// lost then rather than up to a poll interval later. Only the observation
// right after the call is owed it.
func (w *Watchdog) WakeAt(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeAt = t
}

// untilWake is the wait until the wake WakeAt asked for, if one is owed
// before the next poll; it is taken (one wake per request).
func (w *Watchdog) untilWake(now time.Time) (time.Duration, bool) {
	w.mu.Lock()
	at := w.wakeAt
	w.wakeAt = time.Time{}
	w.mu.Unlock()
	if at.IsZero() {
		return 0, false
	}
	d := max(at.Sub(now), 0)
	return d, d < w.untilPoll(now)
}

// untilPoll is how long Run waits for its next poll.
func (w *Watchdog) untilPoll(now time.Time) time.Duration {
	if w.nextTick != nil {
		return w.nextTick(now)
	}
	return untilNextTick(now, w.cfg.PollInterval)
}

// untilNextTick is the wait until the next multiple of every on the wall
// clock: the polls of every member an agent serves fall on one instant, so
// the process wakes once per interval, not once per member (each wakeup of
// an idle process costs more than the work it does).
func untilNextTick(now time.Time, every time.Duration) time.Duration {
	return every - time.Duration(now.UnixNano()%int64(every))
}

// relevant: events on the data dir itself or anything inside it (the parent
// may hold other things, e.g. the quarantine).
// changesEntries: ev adds, removes or renames an entry of walDir or the
// dir itself. etcd appends to its WAL segments all the time; only a cut (a
// new file) or a wipe changes what the agent reads there.
func changesEntries(ev fsnotify.Event, walDir string) bool {
	return ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0 || filepath.Clean(ev.Name) == filepath.Clean(walDir)
}

func relevant(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
