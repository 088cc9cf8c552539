package heal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"go.uber.org/zap"
)

// verify: the rejoined member is a serving voter and every voter has the
// same HashKV at one revision.
func (h *Healer) verify(ctx context.Context, res watchdog.Result, id uint64) (bool, string, error) {
	o := res.Observation
	m, ok := o.Member(id)
	if !ok || m.IsLearner || !m.Serving {
		return false, "rejoined member not yet a serving voter", nil
	}
	eps, err := voterEndpoints(o)
	if err != nil {
		return false, "", err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rev, err := h.cluster.Revision(rctx, eps)
	if err != nil {
		return false, "", err
	}
	var first uint32
	have := false
	for _, v := range o.Members {
		if v.IsLearner || len(v.ClientURLs) == 0 {
			continue
		}
		hash, err := h.cluster.HashKV(rctx, eps, v.ClientURLs[0], rev)
		if err != nil {
			return false, fmt.Sprintf("HashKV of %s at revision %d", v.Name, rev), err
		}
		if !have {
			first, have = hash, true
		} else if hash != first {
			return false, "", fmt.Errorf("HashKV differs at revision %d: %s has %d, others %d", rev, v.Name, hash, first)
		}
	}
	return true, fmt.Sprintf("HashKV %d equal at revision %d", first, rev), nil
}

// finish closes the journal with d's result, releases the Lease and reports.
func (h *Healer) finish(ctx context.Context, j *journal.Record, d plan.Decision) Outcome {
	result := journal.ResultSucceeded
	switch {
	case d.Reason != plan.ReasonNone && !j.Phase.AtLeast(journal.PhaseStopped) && j.StopAttemptedAt.IsZero():
		// Rule 6's re-check, or a refusal (majority-lost, learner-present,
		// ...) after the Lease and before any change: nothing was changed
		// and nothing failed; no failure counted, no backoff.
		result = journal.ResultRefused
	case d.Reason != plan.ReasonNone:
		result = journal.ResultFailed
	}
	return h.close(ctx, j, d, result, nil)
}

// fail closes the recovery as failed. A learner it added and did not promote
// is removed again first, so the cluster is left as it was before the add;
// if that is impossible now, the journal stays open to be resumed.
func (h *Healer) fail(ctx context.Context, j *journal.Record, d plan.Decision, cause error) Outcome {
	if j.Phase.AtLeast(journal.PhaseLearnerAdded) && !j.Phase.AtLeast(journal.PhasePromoted) && j.NewMemberID != 0 && d.Action != plan.RemoveStalledLearner {
		res := h.obs.Observe(ctx, h.now())
		if m, ok := res.Observation.Member(uint64(j.NewMemberID)); ok && m.IsLearner {
			if err := h.removeMember(ctx, res, m.ID); err != nil {
				h.log.Error("recovery failed and its learner could not be removed; the journal stays open to resume",
					zap.Error(cause), zap.NamedError("removeError", err))
				h.releaseLease(ctx)
				return Outcome{Decision: d, Result: journal.ResultFailed, Err: errors.Join(cause, err)}
			}
		}
	}
	return h.close(ctx, j, plan.Decision{Action: plan.Finish, Reason: d.Reason, Detail: cause.Error()}, journal.ResultFailed, cause)
}

func (h *Healer) close(ctx context.Context, j *journal.Record, d plan.Decision, result string, cause error) Outcome {
	now := h.now().UTC()
	j.Result, j.Reason, j.Message, j.FinishedAt = result, string(d.Reason), d.Detail, now
	if result == journal.ResultFailed {
		j.Failures++
		j.LastFailureAt = now
	} else if result == journal.ResultSucceeded {
		j.Failures = 0
	}
	phase := j.Phase
	j.Advance(journal.PhaseDone, now)
	if err := journal.Save(h.cfg.StateDir, *j); err != nil {
		h.log.Error("close journal", zap.Error(err))
	}
	h.releaseLease(ctx)
	took := now.Sub(j.StartedAt)
	if result != journal.ResultRefused {
		h.metrics.RecoveriesTotal.WithLabelValues(h.cfg.Member, result).Inc()
		h.metrics.RecoveryDuration.WithLabelValues(h.cfg.Member).Observe(took.Seconds())
		h.metrics.LastRecovery.WithLabelValues(h.cfg.Member).Set(float64(now.Unix()))
	}
	log := h.log.With(zap.String("id", j.ID), zap.String("result", result), zap.String("reason", string(d.Reason)),
		zap.String("phase", string(phase)), zap.Duration("took", took), zap.String("quarantine", j.QuarantinePath),
		zap.String("snapshot", j.SnapshotPath))
	if result == journal.ResultSucceeded {
		log.Info("recovery succeeded", zap.String("newMemberID", fmtID(uint64(j.NewMemberID))))
	} else {
		log.Warn("recovery ended", zap.String("detail", d.Detail))
	}
	if result == journal.ResultRefused {
		h.countRefusal(d.Reason)
	}
	if result == journal.ResultSucceeded {
		// A manual request made before (or during) this heal is answered
		// by it: the member was just rejoined, never stop it again.
		h.clearRequest(ctx)
	}
	if h.reporter != nil {
		reason, etype := nodereport.ReasonRecoverySucceeded, "Normal"
		switch result {
		case journal.ResultFailed:
			reason, etype = nodereport.ReasonRecoveryFailed, "Warning"
		case journal.ResultRefused:
			reason, etype = nodereport.ReasonRecoveryRefused, "Warning"
		}
		h.reporter.Eventf(etype, reason, "member %s: %s in %s (phase %s) %s; quarantine %s, snapshot %s",
			h.cfg.Member, result, took.Round(time.Millisecond), phase, d.Detail, j.QuarantinePath, j.SnapshotPath)
		_ = h.reporter.SetLastRecovery(ctx, nodereport.LastRecovery{Request: j.Request, Result: result, Reason: string(d.Reason),
			Phase: string(phase), StartedAt: j.StartedAt, FinishedAt: now, Message: d.Detail,
			RejoinMode: j.RejoinMode, SeedFallback: j.SeedFallback})
	}
	return Outcome{Decision: d, Result: result, Err: cause}
}

// releaseLease releases the Lease whether or not Holding() says we hold it
// now: Release stops the renewer (which may hold it again once the API
// answers) and leaves a Lease held by another agent alone.
func (h *Healer) releaseLease(ctx context.Context) {
	if h.lease == nil {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.lease.Release(rctx); err != nil {
		h.log.Warn("release lease", zap.Error(err))
	}
	h.metrics.LeaseHeld.WithLabelValues(h.cfg.Member).Set(0)
}
