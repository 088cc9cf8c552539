package heal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// hashMismatchError ends a recovery: comparable voters answered different
// HashKV (plan.JudgeHashes), so a divergent voter serves reads.
type hashMismatchError struct{ j plan.HashJudgement }

func (e *hashMismatchError) Error() string { return e.j.Detail }

// verifyStep verifies the promoted member: equal HashKV advances the journal
// to verified (its message names the voters not asked), not yet waits for
// the next round, a mismatch is reported and ends the attempt.
func (h *Healer) verifyStep(ctx context.Context, res memberstate.Result, j *journal.Record) error {
	jd, err := h.verify(ctx, res, uint64(j.NewMemberID), j.ClientURLsAside)
	switch {
	case err != nil || jd.Verdict == plan.HashNotYet:
		h.log.Info("verify: not yet", zap.String("detail", jd.Detail), zap.Strings("notServing", jd.Dead), zap.Error(err))
		return nil
	case jd.Verdict == plan.HashMismatch:
		ids := make([]string, len(jd.Diverging))
		for i, id := range jd.Diverging {
			ids[i] = fmtID(id)
		}
		h.metrics.HashMismatchTotal.WithLabelValues(h.cfg.Member).Inc()
		h.log.Error("verify: HashKV mismatch, a divergent voter serves reads", zap.String("reason", string(plan.ReasonHashMismatch)),
			zap.Strings("diverging", ids), zap.String("detail", jd.Detail))
		if h.reporter != nil {
			h.reporter.Eventf("Warning", nodereport.ReasonHashMismatch, "member %s: %s: diverging %v: %s",
				h.cfg.Member, plan.ReasonHashMismatch, ids, jd.Detail)
		}
		return &hashMismatchError{jd}
	}
	h.log.Info("verify: HashKV equal", zap.String("detail", jd.Detail), zap.Strings("notServing", jd.Dead))
	j.Message = jd.Detail
	return h.advance(ctx, j, journal.PhaseVerified)
}

// verify gathers the voters' HashKV answers at one revision for
// plan.JudgeHashes: voters not serving are not asked (reported, not waited
// for); one compacted past the revision is asked again next round, at a
// newer one.
//
// aside is the private client URL the learner listened on ("" none): the
// member is verified once it serves on its own again, not the process the
// kubelet is about to restart (restoreClientURLs).
func (h *Healer) verify(ctx context.Context, res memberstate.Result, id uint64, aside string) (plan.HashJudgement, error) {
	o := res.Observation
	m, ok := o.Member(id)
	if !ok || m.IsLearner || !m.Serving {
		return plan.HashJudgement{Verdict: plan.HashNotYet, Detail: "rejoined member not yet a serving voter"}, nil
	}
	if aside != "" && slices.Contains(m.ClientURLs, aside) {
		return plan.HashJudgement{Verdict: plan.HashNotYet, Detail: "rejoined member still on its set-aside client URL " + aside + ": restarting on its own"}, nil
	}
	eps, err := voterEndpoints(o)
	if err != nil {
		return plan.HashJudgement{Verdict: plan.HashNotYet}, err
	}
	rctx, cancel := context.WithTimeout(ctx, revisionReadTimeout)
	rev, err := h.cluster.Revision(rctx, eps)
	cancel()
	if err != nil {
		return plan.HashJudgement{Verdict: plan.HashNotYet, Detail: "read the revision"}, err
	}
	// One voter at a time: a HashKV holds its member's backend read
	// transaction for the whole keyspace, and that member applies no
	// write meanwhile (its commit waits for the read to end); asked at
	// once, every member would stall the cluster's writes together.
	// How far it is, in bytes of the voters' dbs hashed (a HashKV of a
	// db of several GiB takes seconds).
	var total int64
	for _, v := range o.Members {
		if !v.IsLearner && v.Serving && len(v.ClientURLs) > 0 {
			total += v.DBSize
		}
	}
	h.startMeter(stepVerify, progress.Bytes, total, time.Now())
	defer h.stopMeter(stepVerify)
	var answers []plan.HashAnswer
	left := total
	for _, v := range o.Members {
		if v.IsLearner {
			continue
		}
		a := plan.HashAnswer{ID: v.ID, Name: v.Name, Serving: v.Serving && len(v.ClientURLs) > 0, Revision: rev}
		if a.Name == "" {
			a.Name = fmtID(v.ID)
		}
		if a.Serving {
			h.hashOf(ctx, eps, v, rev, &a)
			left -= v.DBSize
			h.meter(stepVerify, time.Now(), left)
		}
		answers = append(answers, a)
	}
	return plan.JudgeHashes(id, o.Voters(), answers), nil
}

// hashOf asks voter v for its HashKV at rev, with a deadline for its db
// (hashDeadline).
func (h *Healer) hashOf(ctx context.Context, eps []string, v observation.Member, rev int64, a *plan.HashAnswer) {
	hctx, cancel := context.WithTimeout(ctx, hashDeadline(v.DBSize))
	defer cancel()
	hash, compact, err := h.cluster.HashKV(hctx, eps, v.ClientURLs[0], rev)
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		a.Compacted = true
	case err != nil:
		a.Err = err.Error()
	default:
		a.Hash, a.CompactRevision = hash, compact
	}
}

// hashDeadline is a HashKV's deadline for a db of dbSize bytes: a
// whole-keyspace read at hashReadRate, never under 5 s.
func hashDeadline(dbSize int64) time.Duration {
	return max(5*time.Second, time.Duration(dbSize/hashReadRate)*time.Second)
}

// hashReadRate is the slowest whole-keyspace read a HashKV deadline allows
// for (bytes per second).
const hashReadRate = 100 << 20

// finish closes the journal with d's result, releases the Lease and reports.
func (h *Healer) finish(ctx context.Context, j *journal.Record, d plan.Decision) Outcome {
	if j.Kind == journal.KindRollbackLearner {
		return h.closeRollback(ctx, j, d)
	}
	if j.Kind == journal.KindRestoreClientURLs {
		return h.closeRestore(ctx, j, d, false)
	}
	return h.close(ctx, j, d, plan.ResultOfFinish(d, *j), nil)
}

// fail closes the recovery as failed. A learner it added and did not promote
// is removed again first, so the cluster is left as it was before the add;
// if that is impossible now, the journal stays open to be resumed.
func (h *Healer) fail(ctx context.Context, j *journal.Record, d plan.Decision, cause error) Outcome {
	if j.Kind == journal.KindRollbackLearner {
		// Not a recovery of the member: no recoveries_total, no backoff.
		return h.closeRollback(ctx, j, plan.Decision{Action: plan.Finish, Reason: d.Reason, Detail: cause.Error()})
	}
	if j.Kind == journal.KindRestoreClientURLs {
		return h.closeRestore(ctx, j, plan.Decision{Action: plan.Finish, Reason: d.Reason, Detail: cause.Error()}, true)
	}
	if d.Action != plan.RemoveStalledLearner { // that one removed it already
		res := h.obs.Observe(ctx, h.now())
		if id, ok := plan.LearnerToRemoveOnFailure(*j, res.Observation); ok {
			if err := h.removeMember(ctx, res, id); err != nil {
				h.log.Error("recovery failed and its learner could not be removed; the journal stays open to resume",
					zap.Error(cause), zap.NamedError("removeError", err))
				h.releaseLease(ctx)
				return Outcome{Decision: d, Result: journal.ResultFailed, Err: errors.Join(cause, err)}
			}
		}
	}
	if j.Request == plan.ActionMoveAway {
		if err := h.settleMoveAway(ctx, j); err != nil {
			cause = fmt.Errorf("%w; %w", cause, err)
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
	if result == journal.ResultFailed {
		h.putBack(ctx, j)
	}
	phase := j.Phase
	j.Steps = append(j.Steps, h.finishedSteps()...)
	h.removeSeedStreams() // transient: a killed attempt's seed stream or backup provenance record
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
	// A manual request made before (or during) this attempt is answered by
	// it, whatever its result (last-recovery below says which): a member
	// just rejoined is never stopped again for it, and a failed attempt is
	// not repeated behind the SRE's back.
	h.clearRequest(ctx)
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
		_ = nodereport.WriteLastRecovery(ctx, h.reporter, h.log, nodereport.LastRecovery{Request: j.Request, Result: result, Reason: string(d.Reason),
			Phase: string(phase), StartedAt: j.StartedAt, FinishedAt: now, Message: d.Detail,
			RejoinMode: j.RejoinMode, SeedFallback: j.SeedFallback, MoveFrom: j.MoveFrom, MemberID: answeredMember(j, result), Steps: j.Steps})
	}
	out := Outcome{Decision: d, Result: result, Err: cause}
	if result == journal.ResultSucceeded && j.Request == plan.ActionMoveOut {
		out.Retired = h.retireParked(j)
	}
	return out
}

// retireParked retires the member of a succeeded move-out whose manifest
// is still parked (a crash or a failed set-aside since), and clears the
// move's trigger: the move is done.
func (h *Healer) retireParked(j *journal.Record) bool {
	if stopped, err := h.runtime.Stopped(); err != nil || !stopped {
		return false // nothing parked (set aside already), or put back live by a person: the tombstone holds
	}
	if !h.retire(j) {
		return false
	}
	if c, ok := h.reporter.(interface{ ClearMoveRequest(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.ClearMoveRequest(ctx); err != nil {
			h.log.Warn("clearing the move request failed; the source's mover clears it", zap.Error(err))
		}
	}
	return true
}

// answeredMember is the member a succeeded move-in added, or a rejoin
// seeded from a pod move (MoveFrom: the target's side) rejoined: the move's
// source closes on that very member ("" otherwise).
func answeredMember(j *journal.Record, result string) string {
	if (j.Request != plan.ActionMoveIn && j.MoveFrom == "") || result != journal.ResultSucceeded || j.NewMemberID == 0 {
		return ""
	}
	return fmtID(uint64(j.NewMemberID))
}

// retire sets the stopped member's manifest aside for good after a
// move-out: the member serves from its new node, and this one must never
// start (or rejoin) it again.
func (h *Healer) retire(j *journal.Record) bool {
	r, ok := h.runtime.(memberruntime.Retirer)
	if !ok {
		h.log.Warn("member moved away; this runtime cannot set it aside: stop its etcd for good by hand", zap.String("runtime", h.runtime.Describe()))
		return false
	}
	dst, err := r.Retire(filepath.Join(h.cfg.StateDir, "moved"), j.ID)
	if err != nil {
		h.log.Error("member moved away but its manifest could not be set aside; it stays parked", zap.Error(err))
		return false
	}
	h.event("Normal", nodereport.ReasonMemberMoved, "member %s moved to %s: manifest set aside at %s, data dir quarantined at %s", h.cfg.Member, j.MoveTarget, dst, j.QuarantinePath)
	return true
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
