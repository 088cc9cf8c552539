package agent

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// loopWatch is the member loop's safety net for the rule that no step
// blocks the agent without a deadline and a log line (while a step waits,
// the agent keeps observing and reporting): when no observation has been
// exported for longer than after, it says so once, naming the step the
// loop is in, and says when observations come again. It changes nothing.
// (Seen in CI: an agent silent for two minutes in one observation, a deep
// check's child hung with no deadline.)
type loopWatch struct {
	log   *zap.Logger
	after time.Duration

	mu      sync.Mutex
	step    string
	stepAt  time.Time
	lastObs time.Time // the last observation exported (or the loop's start)
	stalled bool      // said, not yet over
}

// loopStallMin is the least bound: a poll whose members do not answer
// waits a probe timeout per request, a few in turn.
const loopStallMin = 30 * time.Second

// stepObserve is the loop's step between two results: the watchdog's poll
// (and the wait for it, at most a poll interval).
const stepObserve = "observing (watchdog poll)"

func newLoopWatch(log *zap.Logger, poll time.Duration, now time.Time) *loopWatch {
	return &loopWatch{log: log, after: max(loopStallMin, 6*poll), step: stepObserve, stepAt: now, lastObs: now}
}

// at names the step the loop goes into.
func (w *loopWatch) at(step string, now time.Time) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.step, w.stepAt = step, now
}

// observed: an observation was exported (the loop's, the healer's or the
// steward's).
func (w *loopWatch) observed(now time.Time) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stalled {
		w.log.Info("the agent's loop observes again", zap.Duration("noObservationFor", now.Sub(w.lastObs).Round(time.Millisecond)),
			zap.String("step", w.step))
		w.stalled = false
	}
	w.lastObs = now
}

// check says a stall once it passes the bound.
func (w *loopWatch) check(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stalled || now.Sub(w.lastObs) <= w.after {
		return
	}
	w.stalled = true
	w.log.Warn("the agent's loop has made no observation for too long: it waits in one step (a wait without a deadline?); the member is neither observed nor reported meanwhile",
		zap.Duration("noObservationFor", now.Sub(w.lastObs).Round(time.Millisecond)), zap.Duration("bound", w.after),
		zap.String("step", w.step), zap.Duration("inStepFor", now.Sub(w.stepAt).Round(time.Millisecond)))
}

// run checks until ctx ends.
func (w *loopWatch) run(ctx context.Context) {
	t := time.NewTicker(w.after / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			w.check(now)
		}
	}
}
