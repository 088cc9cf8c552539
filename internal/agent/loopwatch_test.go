package agent

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The loop's safety net: when no observation has been exported for longer
// than its bound, a warning names the step the loop waits in (once per
// stall), and a line says when observations come again.
func TestTheLoopWatchSaysWhereTheLoopStalls(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	t0 := time.Now()
	w := newLoopWatch(zap.New(core), time.Second, t0)
	if w.after != loopStallMin {
		t.Fatalf("bound %s for a 1s poll, want %s", w.after, loopStallMin)
	}
	w.after = 10 * time.Second
	w.observed(t0)
	w.at("healer (recovery)", t0.Add(time.Second))
	w.check(t0.Add(9 * time.Second))
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d lines within the bound, want none: %v", n, logs.All())
	}
	w.check(t0.Add(11 * time.Second))
	w.check(t0.Add(20 * time.Second))
	warned := logs.FilterMessageSnippet("no observation").FilterField(zap.String("step", "healer (recovery)"))
	if warned.Len() != 1 || logs.Len() != 1 {
		t.Fatalf("want one warning naming the step, got: %v", logs.All())
	}
	w.observed(t0.Add(30 * time.Second))
	if n := logs.FilterMessageSnippet("observes again").Len(); n != 1 {
		t.Fatalf("the loop's return not said once: %v", logs.All())
	}
	w.check(t0.Add(35 * time.Second))
	if n := logs.Len(); n != 2 {
		t.Fatalf("%d lines after the loop went on, want 2: %v", n, logs.All())
	}
	var none *loopWatch // pipelines built without one (tests)
	none.at("x", t0)
	none.observed(t0)
}

// A member's first observation counts too: a loop that never observes is
// said to stall.
func TestTheLoopWatchSaysAFirstObservationThatNeverComes(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	t0 := time.Now()
	w := newLoopWatch(zap.New(core), 20*time.Second, t0)
	if w.after != 6*20*time.Second {
		t.Fatalf("bound %s for a 20s poll, want 2m", w.after)
	}
	w.check(t0.Add(w.after + time.Second))
	if logs.FilterMessageSnippet("no observation").FilterField(zap.String("step", stepObserve)).Len() != 1 {
		t.Fatalf("want one warning naming the observation: %v", logs.All())
	}
}
