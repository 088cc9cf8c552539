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
	dir := w.cfg.Identity.DataDir
	// The parent survives the data dir being removed and re-created; the dir
	// and its member/ subdir report a wipe of the member's files.
	watched := []string{filepath.Dir(dir), dir, filepath.Join(dir, "member")}
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
				if !relevant(ev.Name, dir) {
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
	for {
		onObservation(w.observeTimed(ctx, time.Now(), true))
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			tick.Reset(w.untilPoll(time.Now()))
		case <-trigger:
		case <-w.live.ended: // a member exited or lost its leader
		}
	}
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
func relevant(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
