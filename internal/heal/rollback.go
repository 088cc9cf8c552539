package heal

import (
	"context"
	"strconv"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// The rollback of a stranded learner (plan.RollbackLearner, issue 10 item
// 5): another agent's learner whose owner's Lease expired and that made no
// progress for the stall timeout blocks our heal. We take the Lease, journal
// a rollback record (journal.KindRollbackLearner) before any change, and
// Decide re-checks the learner on a fresh observation before the fenced
// MemberRemove (plan.RemoveStrandedLearner). An agent killed mid-rollback
// resumes the record (a remove of a member already gone is done). The
// record closes with reason learner-rolled-back, an Event and the Node's
// last-recovery; the next poll then begins our own heal.

// beginRollback acquires the Lease and opens the rollback record of
// learner d.MemberID. The last recovery's failure count is kept (its
// backoff still applies to the next rejoin).
func (h *Healer) beginRollback(ctx context.Context, res memberstate.Result, j *journal.Record, d plan.Decision) error {
	l, err := h.leaseOf(res.Observation.ClusterID)
	if err != nil {
		return err
	}
	*j = h.rollbackRecord(*j, d)
	now := j.StartedAt
	info := lease.Info{Target: "learner-" + fmtID(d.MemberID), Phase: journal.KindRollbackLearner, StartedAt: now}
	if err := l.TryAcquire(ctx, info); err != nil {
		return err
	}
	h.tookLease()
	h.metrics.LeaseHeld.WithLabelValues(h.cfg.Member).Set(1)
	h.log.Warn("rolling back a stranded learner", zap.String("reason", string(d.Reason)), zap.String("learner", fmtID(d.MemberID)),
		zap.String("detail", d.Detail), zap.String("id", j.ID))
	return h.advance(ctx, j, journal.PhaseStarted)
}

// rollbackRecord is the record a rollback of d's learner opens; prev is
// the member's last (closed) record, whose failure count it keeps.
func (h *Healer) rollbackRecord(prev journal.Record, d plan.Decision) journal.Record {
	now := h.now().UTC()
	return journal.Record{ID: strconv.FormatInt(now.UnixNano(), 36), Member: h.cfg.Member, Node: h.cfg.Node,
		Request: "auto", Kind: journal.KindRollbackLearner, LearnerID: journal.MemberID(d.MemberID),
		StartedAt: now, PeerURLs: h.cfg.PeerURLs, Failures: prev.Failures, LastFailureAt: prev.LastFailureAt}
}

// removeStranded removes a stranded learner (fenced): the step of a
// rollback record (journaled as phase removed), or, in our own rejoin, at
// the add (a learner added under a Lease that was taken from us, whose
// holder died), reported there with a log line and an Event.
func (h *Healer) removeStranded(ctx context.Context, res memberstate.Result, j *journal.Record, d plan.Decision) error {
	if j.Kind == journal.KindRollbackLearner {
		return h.timed(j, journal.PhaseRemoved, func() error { return h.removeMember(ctx, res, d.MemberID) })
	}
	if h.backupSeeds(j) {
		// Another's learner was in the cluster after our backup. Off on
		// disk before the removal, and in memory only once it is: a save
		// that fails leaves the flag on, so the retry saves it again.
		next := *j
		next.BackupSeeds = false
		if err := journal.Save(h.cfg.StateDir, next); err != nil {
			return err
		}
		j.BackupSeeds = false
	}
	if err := h.removeMember(ctx, res, d.MemberID); err != nil {
		return err
	}
	h.metrics.LearnerRollbacksTotal.WithLabelValues(h.cfg.Member).Inc()
	h.log.Warn("stranded learner rolled back", zap.String("id", j.ID), zap.String("learner", fmtID(d.MemberID)),
		zap.String("reason", string(plan.ReasonLearnerRolledBack)), zap.String("detail", d.Detail), zap.String("phase", string(j.Phase)))
	if h.reporter != nil {
		h.reporter.Eventf("Warning", nodereport.ReasonLearnerRolledBack, "member %s: removed stranded learner %s before adding ours: %s",
			h.cfg.Member, fmtID(d.MemberID), d.Detail)
	}
	return nil
}

// closeRollback closes a rollback record: succeeded when the learner is
// gone, refused when nothing was changed (not stranded on a fresh look,
// quorum lost before the remove), failed otherwise. It is not a recovery
// of the local member: no recoveries_total, the failure count is kept.
func (h *Healer) closeRollback(ctx context.Context, j *journal.Record, d plan.Decision) Outcome {
	now := h.now().UTC()
	result := plan.ResultOfRollback(d, *j)
	j.Result, j.Reason, j.Message, j.FinishedAt = result, string(d.Reason), d.Detail, now
	phase := j.Phase // the failure count (backoff of the member's rejoin) is the last rejoin's, kept
	j.Advance(journal.PhaseDone, now)
	if err := journal.Save(h.cfg.StateDir, *j); err != nil {
		h.log.Error("close journal", zap.Error(err))
	}
	h.releaseLease(ctx)
	took := now.Sub(j.StartedAt)
	log := h.log.With(zap.String("id", j.ID), zap.String("learner", fmtID(uint64(j.LearnerID))), zap.String("result", result),
		zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail), zap.Duration("took", took))
	if result == journal.ResultSucceeded {
		h.metrics.LearnerRollbacksTotal.WithLabelValues(h.cfg.Member).Inc()
		log.Warn("stranded learner rolled back")
	} else {
		log.Info("rollback of a stranded learner closed", zap.String("detail", d.Detail))
	}
	if h.reporter != nil {
		if result == journal.ResultSucceeded {
			h.reporter.Eventf("Warning", nodereport.ReasonLearnerRolledBack,
				"member %s: removed stranded learner %s (its owner's Lease expired, no progress for %s): %s; rejoin of %s may proceed",
				h.cfg.Member, fmtID(uint64(j.LearnerID)), h.cfg.Plan.LearnerStallTimeout, d.Detail, h.cfg.Member)
		}
		if err := h.reporter.SetLastRecovery(ctx, nodereport.LastRecovery{Request: journal.KindRollbackLearner, Result: result,
			Reason: string(d.Reason), Phase: string(phase), StartedAt: j.StartedAt, FinishedAt: now, Message: d.Detail}); err != nil {
			h.log.Warn("last-recovery annotation", zap.Error(err))
		}
	}
	return Outcome{Decision: d, Result: result}
}
