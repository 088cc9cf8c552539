package heal

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// The long steps whose progress is measured (docs/recovery.md, "Progress
// and ETA"): the streams in bytes of the source's db, the catch-up in
// entries of the learner's gap to the leader, the verify in bytes of the
// voters' dbs hashed.
const (
	stepPreChangeStream = "pre-change stream"
	stepSeedStream      = "seed stream"
	stepCatchUp         = "catch-up"
	stepVerify          = "verify"
	// The seed's db placed in the learner's data dir and hashed again
	// there (it must still be what the stream verified).
	stepSeedCheck = "seed check"
	// A raft-mode learner receives the leader's db before it serves.
	stepSnapshotReceive = "snapshot receive"
)

// meterStream follows a stream of total bytes as step: count is the
// stream's progress callback (it also adds to counter, if any), stop ends
// the step.
func (h *Healer) meterStream(step string, total uint64, counter prometheus.Counter) (count func(int64), stop func()) {
	start := time.Now()
	h.startMeter(step, progress.Bytes, int64(total), start)
	var mu sync.Mutex
	var done int64
	count = func(n int64) {
		if counter != nil {
			counter.Add(float64(n))
		}
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

// meters is the healer's state of its progress reporting.
type meters struct {
	// mu orders a step's last sample before its end: the gauges set by
	// meter are never set again after stopMeter deleted them.
	mu sync.Mutex
	// received is the snapshot receive of the learner last seen
	// (meterSnapshotReceive).
	received receiveSeen
	events   progressEvents
}

// startMeter begins step's meter (and its Events: progressEvents).
func (h *Healer) startMeter(step string, unit progress.Unit, total int64, now time.Time) {
	h.cfg.Progress.Start(step, unit, total, now)
	h.meters.events.mu.Lock()
	delete(h.meters.events.said, step)
	h.meters.events.mu.Unlock()
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
	h.meters.events.mu.Lock()
	defer h.meters.events.mu.Unlock()
	if h.meters.events.said == nil {
		h.meters.events.said = map[string]progressSaid{}
	}
	s := h.meters.events.said[e.Step]
	switch {
	case !e.StalledSince.IsZero() && !s.stalled.Equal(e.StalledSince):
		s.stalled = e.StalledSince
		h.reporter.Eventf("Warning", nodereport.ReasonRecoveryStepStalled, "member %s: %s", h.cfg.Member, e)
	case !s.eta && e.ETA >= 0 && e.Left > 0 && e.StalledSince.IsZero():
		s.eta = true
		h.reporter.Eventf("Normal", nodereport.ReasonRecoveryProgress, "member %s: %s", h.cfg.Member, e)
	}
	h.meters.events.said[e.Step] = s
}

// meter records what is left of step and exports its estimate.
func (h *Healer) meter(step string, now time.Time, left int64) {
	h.meters.mu.Lock()
	defer h.meters.mu.Unlock()
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
	h.meters.mu.Lock()
	defer h.meters.mu.Unlock()
	h.cfg.Progress.Stop(step)
	h.metrics.StepProgress.DeleteLabelValues(h.cfg.Member, step)
	h.metrics.StepETA.DeleteLabelValues(h.cfg.Member, step)
}

// stopMeters ends every step's meter (the attempt ends).
func (h *Healer) stopMeters() {
	h.meters.mu.Lock()
	defer h.meters.mu.Unlock()
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

// trackLearner records the learner's progress (for the stall timeout) and its lag.
func (h *Healer) trackLearner(j *journal.Record, res memberstate.Result, now time.Time) {
	m, ok := res.Observation.Member(uint64(j.NewMemberID))
	if !ok {
		return
	}
	if !m.Serving {
		// Receiving the leader's snapshot is progress too (rule 4): a
		// large db may take longer than the stall timeout to arrive.
		// Only the same receive growing counts: a new one (the db sent
		// again after a failed apply) or one seen anew after a restart
		// is no progress (rule 4 must still end a learner that never
		// gets there).
		if file, n, ok := h.meterSnapshotReceive(res.Observation, now); ok {
			seen := receiveSeen{id: m.ID, file: file, bytes: n}
			if prev := h.meters.received; prev.id == seen.id && prev.file == seen.file && seen.bytes > prev.bytes {
				j.LearnerProgressAt = now
			}
			h.meters.received = seen
		}
		return
	}
	h.stopMeter(stepSnapshotReceive)
	if m.AppliedIndex > j.LearnerApplied {
		j.LearnerApplied, j.LearnerProgressAt = m.AppliedIndex, now
	}
	if lag, ok := plan.LearnerLag(res.Observation, m.ID); ok {
		h.metrics.LearnerLag.WithLabelValues(h.cfg.Member).Set(float64(lag))
	}
	h.meterCatchUp(res, m.ID, now)
}

// receiveSeen is the snapshot receive last seen of a learner: its temp file
// and its size.
type receiveSeen struct {
	id    uint64
	file  string
	bytes int64
}

// buildSeed is peerseed.BuildDataDir of the db at dbPath, with its progress
// (stepSeedCheck, in bytes of the db placed and hashed again): seconds for
// a db of several GiB. The step ends once every byte is counted, before a
// test's hold at the rename.
func (h *Healer) buildSeed(dbPath string, newID, clusterID uint64, opts ...peerseed.BuildOption) (peerseed.SeedInfo, error) {
	var size int64
	if st, err := os.Stat(dbPath); err == nil {
		size = st.Size()
	}
	count, stop := h.meterStream(stepSeedCheck, uint64(size), nil)
	defer stop()
	var done int64
	opts = append(opts, peerseed.OnDBBytes(func(n int64) {
		count(n)
		if done += n; done >= size {
			stop()
		}
	}))
	return peerseed.BuildDataDir(dbPath, h.cfg.DataDir, newID, clusterID, h.log, opts...)
}
