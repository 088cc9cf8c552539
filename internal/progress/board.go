package progress

import (
	"slices"
	"sync"
	"time"
)

// Board holds the steps in progress of one member's recovery: written by
// the healer (a stream may run beside a wait: the early pre-change backup),
// read by the reporter for the status file and the Node. A nil Board takes
// and tells nothing.
type Board struct {
	mu       sync.Mutex
	meters   map[string]*Meter
	finished []Summary
}

// Start begins step's meter at now (replacing one of that name).
func (b *Board) Start(step string, unit Unit, total int64, now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.meters == nil {
		b.meters = map[string]*Meter{}
	}
	b.meters[step] = NewMeter(step, unit, total, now)
}

// Running says whether step has a meter.
func (b *Board) Running(step string) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.meters[step]
	return ok
}

// Observe records what is left of step at now and returns its estimate
// (false: step is not running).
func (b *Board) Observe(step string, now time.Time, left int64) (Estimate, bool) {
	if b == nil {
		return Estimate{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.meters[step]
	if !ok {
		return Estimate{}, false
	}
	m.Observe(now, left)
	return m.Estimate(now), true
}

// Stop ends step's meter; what it measured is kept for TakeFinished.
func (b *Board) Stop(step string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if m, ok := b.meters[step]; ok {
		if s, ok := m.summary(); ok {
			b.finished = append(b.finished, s)
		}
		delete(b.meters, step)
	}
}

// TakeFinished returns the summaries of the steps stopped since the last
// call, in the order they ended, and forgets them.
func (b *Board) TakeFinished() []Summary {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.finished
	b.finished = nil
	return out
}

// Estimates are the running steps' estimates at now, oldest step first.
func (b *Board) Estimates(now time.Time) []Estimate {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Estimate
	for _, m := range b.meters {
		out = append(out, m.Estimate(now))
	}
	slices.SortFunc(out, func(a, b Estimate) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}
