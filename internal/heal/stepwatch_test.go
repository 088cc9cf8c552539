package heal

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Issue 10 item 8: a step that waits for a condition that never comes (the
// member never stops) ends at its own deadline, far short of the recovery
// timeout, and the attempt fails saying which step and why.
func TestStepThatNeverEndsHasItsOwnDeadline(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	r.h.cfg.RecoveryTimeout = time.Minute
	r.h.cfg.StepTimeouts = map[plan.Action]time.Duration{plan.StopMember: 100 * time.Millisecond}
	r.rt.stopHangs = true
	done := make(chan Outcome, 1)
	go func() { done <- r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil) }()
	var out Outcome
	select {
	case out = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the attempt still runs 20s after a hung stop whose step deadline is 100ms: only the recovery timeout (1m) bounds it")
	}
	if out.Result != journal.ResultFailed || out.Err == nil || !strings.Contains(out.Err.Error(), "stop-member did not finish within 100ms") {
		t.Fatalf("result %q, err %v; want failed with the stop step's own deadline named", out.Result, out.Err)
	}
}

// Issue 10 item 8: while a step waits, the agent keeps observing (metrics
// and Node reporting go on), says every interval that the step still runs,
// and exports when the step started and how long it may take.
func TestAgentKeepsObservingAndReportingWhileAStepWaits(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	core, logs := observer.New(zap.InfoLevel)
	r.h.log = zap.New(core)
	r.h.cfg.RecoveryTimeout = time.Minute
	r.h.cfg.StepTimeouts = map[plan.Action]time.Duration{plan.StopMember: 400 * time.Millisecond}
	r.h.cfg.ProgressEvery = 50 * time.Millisecond
	r.h.cfg.PollInterval = 20 * time.Millisecond
	r.rt.stopHangs = true
	var during atomic.Int64
	var started atomic.Value
	r.obs.onObserve = func(int) {
		if r.rt.hanging.Load() {
			during.Add(1)
			started.Store(testutil.ToFloat64(r.m.StepStarted.WithLabelValues("m1", string(plan.StopMember))))
		}
	}
	r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	if n := during.Load(); n < 3 {
		t.Fatalf("%d observations while the stop step hung for 5 x 400ms; want the agent to keep observing every poll", n)
	}
	if v, _ := started.Load().(float64); v <= 0 {
		t.Fatalf("step_started_timestamp_seconds{action=stop-member} = %v while the step ran; want its start time", v)
	}
	if n := logs.FilterMessage("recovery step still running").Len(); n < 2 {
		t.Fatalf("%d 'recovery step still running' lines while the step hung; want one per interval", n)
	}
	if n := testutil.CollectAndCount(r.m.StepStarted); n != 0 {
		t.Fatalf("%d step_started series after the attempt ended; want none", n)
	}
}

// Issue 10 item 8: a wait between steps (here: the old member cannot be
// removed without losing quorum) says, while it lasts, that it still waits
// and on what, and shows as a step with its start time.
func TestWaitBetweenStepsIsLoggedWhileItLasts(t *testing.T) {
	res := cluster3(memberstate.Lost, 2) // 1 of 3 serving: removing the stopped member waits
	r := newRig(t, res)
	core, logs := observer.New(zap.InfoLevel)
	r.h.log = zap.New(core)
	r.h.cfg.RecoveryTimeout = 500 * time.Millisecond
	r.h.cfg.ProgressEvery = 50 * time.Millisecond
	r.journalAt(t, "auto", journal.PhaseSnapshotted, 0xa1, 0)
	var shown atomic.Bool
	r.obs.onObserve = func(int) {
		if testutil.CollectAndCount(r.m.StepStarted) > 0 {
			shown.Store(true)
		}
	}
	r.h.Consider(context.Background(), res, nil)
	if n := logs.FilterMessage("recovery still waiting").Len(); n < 2 {
		t.Fatalf("%d 'recovery still waiting' lines during a 500ms wait; want one per 50ms interval", n)
	}
	if !shown.Load() {
		t.Fatal("no step_started series while the recovery waited")
	}
}
