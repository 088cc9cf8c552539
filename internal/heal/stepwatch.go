package heal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// waitExpected is how long a wait between steps (quorum, a learner's
// catch-up, verification) may last before it is worth a look: the member
// is usually stopped meanwhile and the cluster one failure closer to losing
// quorum.
const waitExpected = 5 * time.Minute

// stepTimeout is a step's own deadline: far short of the recovery timeout,
// so that a step waiting for a condition that will never come fails (and
// is retried on a fresh observation) instead of silencing the attempt.
func (h *Healer) stepTimeout(a plan.Action) time.Duration {
	if d, ok := h.cfg.StepTimeouts[a]; ok && d > 0 {
		return d
	}
	d := 2 * time.Minute // Lease, journal, start, verify
	switch a {
	case plan.StopMember:
		d = 5 * time.Minute // leadership hand-off (10 s) + the stop wait (3 min) + the quarantine rename
	case plan.RemoveMember, plan.Promote, plan.RemoveStalledLearner, plan.RemoveStrandedLearner:
		d = time.Minute // the fence and one membership change (10 s)
	case plan.TakeSnapshot, plan.AddLearner, plan.PrepareDataDir:
		d = 15 * time.Minute // streams and writes the whole db
	}
	if slices.ContainsFunc(h.heldAt(), func(p string) bool { return slices.Contains(holdPointsIn[a], p) }) {
		// The e2e suite holds this step at a hook until the test releases
		// it: the hold is the test's time, not the step's.
		d = max(d, h.cfg.RecoveryTimeout)
	}
	return d
}

// stepDeadline is d's own deadline under observation o: stepTimeout, and
// for Verify no less than the revision read and every voter's HashKV one
// after the other (verify), which for dbs of several GiB outlasts the step's
// own 2 min.
func (h *Healer) stepDeadline(d plan.Decision, o observation.Observation) time.Duration {
	t := h.stepTimeout(d.Action)
	if d.Action != plan.Verify {
		return t
	}
	need := revisionReadTimeout
	for _, v := range o.Members {
		if !v.IsLearner {
			need += hashDeadline(v.DBSize)
		}
	}
	return max(t, need)
}

// revisionReadTimeout bounds verify's read of the revision it hashes at.
const revisionReadTimeout = 5 * time.Second

// holdPointsIn are the test hold points (testhooks.go) inside each step.
var holdPointsIn = map[plan.Action][]string{
	plan.Begin:          {HoldLeaseAcquired},
	plan.AddLearner:     {HoldSeedStreamed, HoldSeedRename, HoldMemberStart},
	plan.PrepareDataDir: {HoldSeedStreamed, HoldSeedRename},
	plan.StartMember:    {HoldMemberStart},
}

// expectedFor is how long d may run (a step) or last (a repeated decision:
// a wait, a verification) before it is worth a look.
func (h *Healer) expectedFor(d plan.Decision) time.Duration {
	switch d.Action {
	case plan.Nothing, plan.Verify:
		return waitExpected
	case plan.WaitCatchUp:
		return max(waitExpected, h.cfg.Plan.LearnerStallTimeout)
	}
	return h.stepTimeout(d.Action) / 2
}

// stepLabel names d in the step metrics and logs: the action, or for a
// wait the reason it waits on.
func stepLabel(d plan.Decision) string {
	if d.Action == plan.Nothing && d.HasReason() {
		return "wait-" + string(d.Reason)
	}
	return string(d.Action)
}

// stepClock follows the decision the recovery loop is on: since when the
// same decision has been taken (a wait or a repeated step lasts across
// polls), exported as StepStarted/StepExpected and said every
// ProgressEvery while it lasts.
type stepClock struct {
	label  string
	since  time.Time
	logged time.Time
}

// track is called with each decision of the loop.
func (h *Healer) track(c *stepClock, d plan.Decision) {
	label, now := stepLabel(d), time.Now()
	if label != c.label {
		if d.Action != plan.WaitCatchUp {
			h.stopMeter(stepCatchUp) // the wait they measured is over
			h.stopMeter(stepSnapshotReceive)
		}
		if c.label != "" {
			h.metrics.StepStarted.DeleteLabelValues(h.cfg.Member, c.label)
			h.metrics.StepExpected.DeleteLabelValues(h.cfg.Member, c.label)
		}
		*c = stepClock{label: label, since: now, logged: now}
		h.metrics.StepStarted.WithLabelValues(h.cfg.Member, label).Set(float64(h.now().Unix()))
		h.metrics.StepExpected.WithLabelValues(h.cfg.Member, label).Set(h.expectedFor(d).Seconds())
		return
	}
	if now.Sub(c.logged) >= h.cfg.ProgressEvery {
		c.logged = now
		h.log.Info("recovery still waiting", append([]zap.Field{zap.String("on", label), zap.String("reason", string(d.Reason)),
			zap.String("detail", d.Detail), zap.Duration("waited", now.Sub(c.since).Round(time.Millisecond)),
			zap.Duration("expected", h.expectedFor(d))}, h.progressFields()...)...)
	}
}

// untrack removes the step series when the attempt ends.
func (h *Healer) untrack() {
	h.stopMeters()
	h.metrics.StepStarted.DeletePartialMatch(prometheus.Labels{"member": h.cfg.Member})
	h.metrics.StepExpected.DeletePartialMatch(prometheus.Labels{"member": h.cfg.Member})
}

// runStep runs one step under its own deadline (stepDeadline). While it
// runs, the agent keeps observing every PollInterval (the observer exports
// metrics and reports on the Node; what it sees is not used to decide) and
// says every ProgressEvery that the step still runs.
func (h *Healer) runStep(ctx context.Context, d plan.Decision, o observation.Observation, do func(ctx context.Context) error) error {
	timeout := h.stepDeadline(d, o)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		h.watchStep(sctx, stop, stepLabel(d), timeout)
	}()
	err := do(sctx)
	close(stop)
	<-watched // one observer at a time: the loop observes next
	if err != nil && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%s did not finish within %s (its own deadline): %w", d.Action, timeout, err)
	}
	return err
}

func (h *Healer) watchStep(ctx context.Context, stop <-chan struct{}, label string, timeout time.Duration) {
	start := time.Now()
	observe := time.NewTicker(h.cfg.PollInterval)
	defer observe.Stop()
	progress := time.NewTicker(h.cfg.ProgressEvery)
	defer progress.Stop()
	for {
		select {
		case <-stop:
			return
		case <-observe.C:
			h.obs.Observe(ctx, h.now())
		case <-progress.C:
			h.log.Info("recovery step still running", append([]zap.Field{zap.String("action", label),
				zap.Duration("running", time.Since(start).Round(time.Millisecond)), zap.Duration("deadline", timeout)}, h.progressFields()...)...)
		}
	}
}
