package heal

import (
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// The long steps whose progress is measured (docs/recovery.md, "Progress
// and ETA"): the streams in bytes of the source's db, the catch-up in
// entries of the learner's gap to the leader.
const (
	stepPreChangeStream = "pre-change stream"
	stepSeedStream      = "seed stream"
	stepCatchUp         = "catch-up"
)

// meterStream follows a stream of total bytes as step: count is the
// stream's progress callback (it also adds to counter), stop ends the step.
func (h *Healer) meterStream(step string, total uint64, counter prometheus.Counter) (count func(int64), stop func()) {
	start := time.Now()
	h.cfg.Progress.Start(step, progress.Bytes, int64(total), start)
	var mu sync.Mutex
	var done int64
	count = func(n int64) {
		counter.Add(float64(n))
		mu.Lock()
		defer mu.Unlock()
		done += n
		h.meter(step, time.Now(), int64(total)-done)
	}
	return count, func() { h.stopMeter(step) }
}

// meterCatchUp samples the learner's gap to the leader while the recovery
// waits for it to catch up (the step ends with the wait: track).
func (h *Healer) meterCatchUp(res memberstate.Result, learner uint64, now time.Time) {
	lag, ok := plan.LearnerLag(res.Observation, learner)
	if !ok {
		return
	}
	if !h.cfg.Progress.Running(stepCatchUp) {
		h.cfg.Progress.Start(stepCatchUp, progress.Entries, 0, now)
	}
	h.meter(stepCatchUp, now, int64(lag))
}

// meter records what is left of step and exports its estimate.
func (h *Healer) meter(step string, now time.Time, left int64) {
	e, ok := h.cfg.Progress.Observe(step, now, left)
	if !ok {
		return
	}
	h.metrics.StepProgress.WithLabelValues(h.cfg.Member, step).Set(e.Done())
	eta := -1.0
	if e.ETA >= 0 && e.StalledSince.IsZero() {
		eta = e.ETA.Seconds()
	}
	h.metrics.StepETA.WithLabelValues(h.cfg.Member, step).Set(eta)
}

func (h *Healer) stopMeter(step string) {
	h.cfg.Progress.Stop(step)
	h.metrics.StepProgress.DeleteLabelValues(h.cfg.Member, step)
	h.metrics.StepETA.DeleteLabelValues(h.cfg.Member, step)
}

// stopMeters ends every step's meter (the attempt ends).
func (h *Healer) stopMeters() {
	for _, e := range h.cfg.Progress.Estimates(time.Now()) {
		h.cfg.Progress.Stop(e.Step)
	}
	h.metrics.StepProgress.DeletePartialMatch(prometheus.Labels{"member": h.cfg.Member})
	h.metrics.StepETA.DeletePartialMatch(prometheus.Labels{"member": h.cfg.Member})
}

// progressFields are the running steps' estimates for a log line.
func (h *Healer) progressFields() []zap.Field {
	var out []string
	for _, e := range h.cfg.Progress.Estimates(time.Now()) {
		out = append(out, e.String())
	}
	if len(out) == 0 {
		return nil
	}
	return []zap.Field{zap.Strings("progress", out)}
}
