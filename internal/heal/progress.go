package heal

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
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
	// A raft-mode learner receives the leader's db before it serves.
	stepSnapshotReceive = "snapshot receive"
)

// meterStream follows a stream of total bytes as step: count is the
// stream's progress callback (it also adds to counter), stop ends the step.
func (h *Healer) meterStream(step string, total uint64, counter prometheus.Counter) (count func(int64), stop func()) {
	start := time.Now()
	h.startMeter(step, progress.Bytes, int64(total), start)
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
		h.startMeter(stepCatchUp, progress.Entries, 0, now)
	}
	h.meter(stepCatchUp, now, int64(lag))
}

// meterSnapshotReceive follows a learner that does not serve yet while it
// receives the leader's db: etcd writes it to a temp file in member/snap
// before it renames it (SaveDBFrom), so its size is the bytes received of
// about the leader's db size. It returns the bytes received (false: no
// receive seen). The file is sampled every receiveSampleEvery by a
// goroutine of its own (an observation may take seconds while the learner
// is busy), which ends with the file or with the step (stopMeter: the wait
// or the attempt is over).
func (h *Healer) meterSnapshotReceive(o observation.Observation, now time.Time) (string, int64, bool) {
	leader, ok := o.Member(o.LeaderID)
	if !ok || leader.DBSize <= 0 {
		return "", 0, false
	}
	snapDir := filepath.Join(h.cfg.DataDir, "member", "snap")
	file, received := receivingSnapshot(snapDir)
	if received <= 0 {
		return "", 0, false
	}
	if !h.cfg.Progress.Running(stepSnapshotReceive) {
		h.startMeter(stepSnapshotReceive, progress.Bytes, leader.DBSize, now)
		h.meter(stepSnapshotReceive, now, leader.DBSize-received)
		go h.sampleReceive(snapDir, leader.DBSize)
	}
	return file, received, true
}

// receiveSampleEvery is how often a snapshot receive is sampled.
const receiveSampleEvery = 250 * time.Millisecond

func (h *Healer) sampleReceive(snapDir string, total int64) {
	t := time.NewTicker(receiveSampleEvery)
	defer t.Stop()
	for range t.C {
		if !h.cfg.Progress.Running(stepSnapshotReceive) {
			return
		}
		_, received := receivingSnapshot(snapDir)
		if received <= 0 {
			// The temp file is gone: received and renamed (or given up:
			// etcd removes it then; a new receive starts the step anew).
			h.meter(stepSnapshotReceive, time.Now(), 0)
			h.stopMeter(stepSnapshotReceive)
			return
		}
		h.meter(stepSnapshotReceive, time.Now(), total-received)
	}
}

// receivingSnapshot is the largest of etcd's temp files of a snapshot being
// received in snapDir, and its size (0: none).
func receivingSnapshot(snapDir string) (file string, size int64) {
	names, _ := filepath.Glob(filepath.Join(snapDir, "tmp*"))
	for _, n := range names {
		if fi, err := os.Lstat(n); err == nil && fi.Mode().IsRegular() && fi.Size() > size {
			file, size = filepath.Base(n), fi.Size()
		}
	}
	return file, size
}

// startMeter begins step's meter (and its Events: progressEvents).
func (h *Healer) startMeter(step string, unit progress.Unit, total int64, now time.Time) {
	h.cfg.Progress.Start(step, unit, total, now)
	h.events.mu.Lock()
	delete(h.events.said, step)
	h.events.mu.Unlock()
}

// progressEvents are the Events said of each step: one when its rate is
// first known (how far, the ETA), one each time it stalls; no more, so that
// a long stream is not an Event a second.
type progressEvents struct {
	mu   sync.Mutex
	said map[string]progressSaid
}

type progressSaid struct {
	eta     bool
	stalled time.Time // the stall said (its start)
}

// tell says e as an Event if it is news (progressEvents).
func (h *Healer) tell(e progress.Estimate) {
	if h.reporter == nil {
		return // no API to say it to: the logs and metrics do
	}
	h.events.mu.Lock()
	defer h.events.mu.Unlock()
	if h.events.said == nil {
		h.events.said = map[string]progressSaid{}
	}
	s := h.events.said[e.Step]
	switch {
	case !e.StalledSince.IsZero() && !s.stalled.Equal(e.StalledSince):
		s.stalled = e.StalledSince
		h.reporter.Eventf("Warning", nodereport.ReasonRecoveryStepStalled, "member %s: %s", h.cfg.Member, e)
	case !s.eta && e.ETA >= 0 && e.Left > 0 && e.StalledSince.IsZero():
		s.eta = true
		h.reporter.Eventf("Normal", nodereport.ReasonRecoveryProgress, "member %s: %s", h.cfg.Member, e)
	}
	h.events.said[e.Step] = s
}

// meter records what is left of step and exports its estimate.
func (h *Healer) meter(step string, now time.Time, left int64) {
	h.meterMu.Lock()
	defer h.meterMu.Unlock()
	e, ok := h.cfg.Progress.Observe(step, now, left)
	if !ok {
		return
	}
	h.tell(e)
	h.metrics.StepProgress.WithLabelValues(h.cfg.Member, step).Set(e.Done())
	eta := -1.0
	if e.ETA >= 0 && e.StalledSince.IsZero() {
		eta = e.ETA.Seconds()
	}
	h.metrics.StepETA.WithLabelValues(h.cfg.Member, step).Set(eta)
}

func (h *Healer) stopMeter(step string) {
	h.meterMu.Lock()
	defer h.meterMu.Unlock()
	h.cfg.Progress.Stop(step)
	h.metrics.StepProgress.DeleteLabelValues(h.cfg.Member, step)
	h.metrics.StepETA.DeleteLabelValues(h.cfg.Member, step)
}

// stopMeters ends every step's meter (the attempt ends).
func (h *Healer) stopMeters() {
	h.meterMu.Lock()
	defer h.meterMu.Unlock()
	for _, e := range h.cfg.Progress.Estimates(time.Now()) {
		h.cfg.Progress.Stop(e.Step)
	}
	h.metrics.StepProgress.DeletePartialMatch(prometheus.Labels{"member": h.cfg.Member})
	h.metrics.StepETA.DeletePartialMatch(prometheus.Labels{"member": h.cfg.Member})
}

// finishedSteps say what the steps ended since the last call did.
func (h *Healer) finishedSteps() []string {
	var out []string
	for _, s := range h.cfg.Progress.TakeFinished() {
		out = append(out, s.String())
	}
	return out
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
