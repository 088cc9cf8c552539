package heal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/record"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// recover runs one recovery (new or resumed) until it finishes, fails, or
// the recovery timeout passes.
func (h *Healer) recover(parent context.Context, first memberstate.Result, req *plan.Request, j journal.Record) Outcome {
	ctx, cancel := context.WithTimeout(parent, h.cfg.RecoveryTimeout)
	defer cancel()
	// The Lease's renewer lives exactly as long as this attempt: released on
	// every way out (also when Holding() is false at that moment, e.g. the
	// API is down: the renewer would renew it again once the API is back,
	// forever). An open journal resumes with a fresh TryAcquire.
	keepLease := false              // shutdown mid-stop: see shutdown
	defer h.dropEarlyBackup(parent) // after the Lease is released: its wait holds nobody up
	defer func() {
		if !keepLease {
			h.releaseLease(parent)
		}
	}()
	if !h.takeUnanswered {
		h.blocked(plan.Decision{})
	}
	h.cfg.Progress.TakeFinished() // an earlier attempt's, said already
	h.metrics.RecoveryInProgress.WithLabelValues(h.cfg.Member).Set(1)
	defer h.metrics.RecoveryInProgress.WithLabelValues(h.cfg.Member).Set(0)
	defer h.untrack()
	res := first
	var last plan.Decision
	var clock stepClock
	stepErrors := 0
	for {
		t0 := time.Now()
		in := h.input(ctx, res, req, j)
		d := plan.Decide(in, h.planConfig())
		h.metrics.LeaseHeld.WithLabelValues(h.cfg.Member).Set(metrics.Bool(in.LeaseHeld)) // exactly while held
		tInput := time.Since(t0)
		if d.Action != last.Action || d.Reason != last.Reason {
			h.log.Info("recovery step", zap.String("action", string(d.Action)), zap.String("reason", string(d.Reason)),
				zap.String("detail", d.Detail), zap.String("phase", string(j.Phase)))
		}
		last = d
		h.track(&clock, d)
		if !j.Active() && !d.Begins() {
			// Decide changed its mind before we began (e.g. the member came back).
			if d.Action == plan.Refuse {
				h.refused(ctx, req, d)
				return Outcome{Decision: d, Result: journal.ResultRefused}
			}
			return Outcome{Decision: d}
		}
		if j.Active() && !in.LeaseHeld && d.LeaseTakenByOther() {
			// The renewer found the Lease taken (ours lapsed): as on a
			// failed fence, stop at once; the journal stays open for this
			// agent or the holder to resume. Nothing failed.
			h.log.Warn("recovery stopped: the Lease is held by another agent", zap.String("reason", string(plan.ReasonLeaseLost)),
				zap.String("holder", in.LeaseHolder), zap.String("phase", string(j.Phase)))
			return Outcome{Decision: plan.Decision{Action: plan.Nothing, Reason: plan.ReasonLeaseLost, Detail: d.Detail}, Err: lease.ErrHeldByOther}
		}
		if d.Action == plan.Nothing && d.WaitsForMoveTarget() {
			// A pod move released to its target: the rest is the target
			// agent's, under the Lease, which this attempt gives up now
			// (deferred). Each poll looks again (consider) without it;
			// the journal closes the move. The request is in hand, not
			// refused: its answer is the move's end.
			h.log.Info("pod move released: waiting for its member on the target, without the Lease", zap.String("detail", d.Detail))
			return Outcome{Decision: d, Answered: req != nil}
		}
		if d.Action == plan.Finish {
			return h.finish(ctx, &j, d)
		}
		if d.Action == plan.Refuse {
			return h.finish(ctx, &j, plan.Decision{Action: plan.Finish, Reason: d.Reason, Detail: d.Detail})
		}
		if d.Action == plan.RemoveStalledLearner {
			// Rule 4: a learner that makes no progress is removed again and
			// the attempt fails cleanly (retried later with backoff).
			if err := h.runStep(ctx, d, res.Observation, func(ctx context.Context) error { return h.removeMember(ctx, res, d.MemberID) }); err != nil {
				return h.fail(ctx, &j, d, fmt.Errorf("remove stalled learner: %w", err))
			}
			return h.fail(ctx, &j, d, fmt.Errorf("learner %s stalled: %s", fmtID(d.MemberID), d.Detail))
		}
		err := h.runStep(ctx, d, res.Observation, func(ctx context.Context) error { return h.step(ctx, res, req, &j, d, in.Claim) })
		if parent.Err() != nil {
			keepLease = stopInFlight(j)
			return h.shutdown(&j, d, keepLease)
		}
		sr := h.stepResult(d, err, j, res)
		sr.ErrorsInARow = stepErrors
		next := plan.AfterStep(sr)
		stepErrors = next.ErrorsInARow
		if next.ErrorsInARow > sr.ErrorsInARow { // a failure counted (the 5th too, before the attempt fails)
			h.log.Warn("recovery step failed", zap.String("action", string(d.Action)), zap.Int("attempt", stepErrors), zap.Error(err))
		}
		switch next.Then {
		case plan.ThenFail:
			closing := &j
			if next.CloseOpening {
				closing = h.closing(&j, d, res, req, in.Claim)
			}
			if next.CountRefusal {
				h.log.Warn("recovery step refused", zap.String("action", string(d.Action)), zap.String("reason", string(next.Decision.Reason)), zap.Error(err))
				h.countRefusal(next.Decision.Reason)
			}
			return h.fail(ctx, closing, next.Decision, err)
		case plan.ThenRefuse, plan.ThenWaitToResume:
			// The Lease could not be taken (the API server read it, then
			// did not answer the take; or an earlier hold's backup stream
			// has not ended). Said and counted once, blocked since the
			// first (the polls in between decide Begin).
			h.takeUnanswered = true
			h.blocked(next.Decision)
			if next.Then == plan.ThenRefuse {
				h.refused(ctx, req, next.Decision)
				return Outcome{Decision: next.Decision, Result: journal.ResultRefused, Err: err}
			}
			// (the request, if any, is answered by the recovery when it resumes)
			h.refused(ctx, nil, next.Decision)
			return Outcome{Decision: next.Decision, Err: err}
		case plan.ThenStopLeaseLost:
			h.log.Warn("recovery stopped: the Lease is not ours", zap.String("reason", string(next.Decision.Reason)),
				zap.Error(err), zap.String("phase", string(j.Phase)))
			h.metrics.LeaseHeld.WithLabelValues(h.cfg.Member).Set(0)
			return Outcome{Decision: next.Decision, Err: err}
		}
		if sr.Cause == plan.StepEtcdAsksToWait {
			h.log.Info("etcd asks to wait before the membership change (unhealthy cluster); retrying",
				zap.String("action", string(d.Action)))
		}
		if next.ReloadJournal {
			saved, ok, lerr := journal.Load(h.cfg.StateDir, h.cfg.Member)
			if lerr != nil || !ok || saved.ID != j.ID {
				h.log.Warn("the journal cannot be read back after a failed step: the attempt stops here and resumes from the journal at the next poll",
					zap.String("id", j.ID), zap.Bool("found", ok), zap.String("foundID", saved.ID), zap.Error(lerr))
				return Outcome{Decision: d, Err: fmt.Errorf("%w; the journal, read back: found %v, id %q, %v", err, ok, saved.ID, lerr)}
			}
			j = saved // (BackupSeeds is off on disk before it is in memory)
		}
		if ctx.Err() != nil {
			return h.fail(parent, h.closing(&j, d, res, req, in.Claim), d, fmt.Errorf("recovery timed out after %s in phase %s: %w", h.cfg.RecoveryTimeout, j.Phase, ctx.Err()))
		}
		if next.Pause {
			select {
			case <-ctx.Done():
			case <-time.After(h.cfg.StepInterval):
			}
		}
		t1 := time.Now()
		// The tracker's own verdict, as is: rule 6's re-check decides on it.
		res = h.obs.Observe(ctx, h.now())
		h.log.Debug("recovery loop timing", zap.String("action", string(d.Action)), zap.Duration("input", tInput),
			zap.Duration("step", t1.Sub(t0)-tInput), zap.Duration("observe", time.Since(t1)))
	}
}

// errEarlierStreamLingers: begin found the backup streamed under an earlier
// hold still running after its cancel (bounded wait); the Lease is not
// taken meanwhile, so nothing under the new hold meets that stream.
var errEarlierStreamLingers = errors.New("a backup streamed under an earlier hold of the Lease has not ended after its cancel; the Lease is taken once it has")

// stepResult is what d's run came back with, as the executor saw it:
// err classified, never judged (plan.AfterStep judges).
func (h *Healer) stepResult(d plan.Decision, err error, j journal.Record, res memberstate.Result) plan.StepResult {
	r := plan.StepResult{Decided: d, Cause: plan.StepOK, JournalOpen: j.Active(), MoveReleased: moveReleased(j)}
	if err == nil {
		return r
	}
	r.Err = err.Error()
	var mismatch *hashMismatchError
	refusal, refused := plan.RefusalOf(err)
	switch {
	case errors.As(err, &mismatch):
		r.Cause, r.Err = plan.StepHashMismatch, mismatch.Error()
	case refused && !r.MoveReleased:
		r.Cause, r.Refusal = plan.StepRefused, refusal.Reason
	case errors.Is(err, lease.ErrAPIUnavailable):
		r.Cause = plan.StepLeaseTakeUnanswered
	case errors.Is(err, errEarlierStreamLingers):
		r.Cause = plan.StepEarlierStreamLingers
	case errors.Is(err, errResumeNotSaved) && outOfSpace(err):
		r.Cause = plan.StepResumeNotSavedDiskFull
	case errors.Is(err, lease.ErrHeldByOther), errors.Is(err, lease.ErrNotHeld):
		r.Cause = plan.StepLeaseLost
	case errors.Is(err, rpctypes.ErrUnhealthy):
		r.Cause = plan.StepEtcdAsksToWait
	default:
		r.Cause = plan.StepFailed
	}
	takeNotMade := r.Cause == plan.StepLeaseTakeUnanswered || r.Cause == plan.StepEarlierStreamLingers || r.Cause == plan.StepResumeNotSavedDiskFull
	if takeNotMade && d.Action == plan.Begin && j.Active() { // (asked only then: it asks the runtime)
		r.PutBackRestarts = h.putBackRestarts(j, res.Observation)
	}
	return r
}

// errResumeNotSaved: a resume's journal could not be saved before the
// take (the Lease was not taken).
var errResumeNotSaved = errors.New("the resumed recovery's journal could not be saved; the Lease was not taken")

// outOfSpace: err is a write that found no room (a full disk, a quota, a
// file size limit).
func outOfSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
}

// shutdown: the agent stops (SIGTERM, a rolling update). Not a failure:
// the journal stays open and the next start resumes it; the Lease is
// released by recover.
//
// A stop in flight (tried, not yet confirmed) keeps the Lease: the manifest
// may be parked while the kubelet has not yet stopped etcd, so every other
// agent still counts this member as serving and might stop its own. The
// renewer holds the Lease until the process exits; it then expires after
// its TTL, by which time the member is down and seen so, or the restarted
// agent resumes and takes it again.
func (h *Healer) shutdown(j *journal.Record, d plan.Decision, keepLease bool) Outcome {
	h.log.Info("agent shutting down mid-recovery: the journal stays open to resume at the next start",
		zap.String("id", j.ID), zap.String("phase", string(j.Phase)), zap.Bool("leaseKeptForAStopInFlight", keepLease))
	return Outcome{Decision: d, Err: context.Canceled}
}

// stopInFlight: the stop was tried and not yet confirmed (the member may
// still be going down).
func stopInFlight(j record.Record) bool {
	return !j.StopAttemptedAt.IsZero() && !j.Phase.AtLeast(record.PhaseStopped)
}

// step carries out one decision and records it in the journal.
func (h *Healer) step(ctx context.Context, res memberstate.Result, req *plan.Request, j *journal.Record, d plan.Decision, claim *plan.ClaimFacts) error {
	now := h.now().UTC()
	switch d.Action {
	case plan.Begin:
		return h.begin(ctx, res, req, j, claim)
	case plan.RollbackLearner:
		return h.beginRollback(ctx, res, j, d)
	case plan.RemoveStrandedLearner:
		return h.removeStranded(ctx, res, j, d)
	case plan.StopMember:
		if j.StopAttemptedAt.IsZero() {
			// Recorded first: once tried, the member may be down by our
			// hand, and Decide must not take that for a member in its grace.
			j.StopAttemptedAt = now
			if err := journal.Save(h.cfg.StateDir, *j); err != nil {
				return err
			}
		}
		h.startEarlyBackup(ctx, res, j, d)
		return h.timed(j, journal.PhaseStopped, func() error { return h.stopAndQuarantine(ctx, res, j) })
	case plan.TakeSnapshot:
		if j.Request == plan.ActionMoveAway && !j.Phase.AtLeast(journal.PhaseStopped) {
			// A pod move's snapshot, taken while the member serves: the
			// phases stay in their order (journal.StoreKey says it is done).
			if err := h.snapshot(ctx, res, j, d); err != nil {
				return err
			}
			return journal.Save(h.cfg.StateDir, *j)
		}
		return h.timed(j, journal.PhaseSnapshotted, func() error { return h.snapshot(ctx, res, j, d) })
	case plan.RemoveMember:
		return h.timed(j, journal.PhaseRemoved, func() error { return h.removeMember(ctx, res, d.MemberID) })
	case plan.AddLearner:
		if err := h.timed(j, journal.PhaseLearnerAdded, func() error { return h.addLearner(ctx, res, j) }); err != nil {
			return err
		}
		// Start the learner right away: the leader begins replicating to it
		// at the add, and a learner that appears seconds later is more
		// likely to lose its first publish to the cluster (etcd then waits
		// its 7 s request timeout before retrying). Prepare and start change
		// no membership; on a crash in between, Decide resumes them.
		if err := h.timed(j, journal.PhasePrepared, func() error { return h.prepareDataDir(ctx, res, j, d.Seed) }); err != nil {
			return err
		}
		return h.timed(j, journal.PhaseMemberStarted, func() error { return h.startLearner(ctx, res, j, d) })
	case plan.AdoptLearner:
		j.NewMemberID = journal.MemberID(d.MemberID)
		h.log.Info("adopting the learner an earlier add created", zap.String("id", fmtID(d.MemberID)))
		return h.advance(ctx, j, journal.PhaseLearnerAdded)
	case plan.PrepareDataDir:
		return h.timed(j, journal.PhasePrepared, func() error { return h.prepareDataDir(ctx, res, j, d.Seed) })
	case plan.StartMember:
		return h.timed(j, journal.PhaseMemberStarted, func() error { return h.startLearner(ctx, res, j, d) })
	case plan.RestoreClientURLs:
		return h.restoreClientURLs(ctx, res, j, d)
	case plan.BeginRestoreClientURLs:
		return h.beginRestoreClientURLs(ctx, res, j, d)
	case plan.WaitCatchUp:
		h.trackLearner(j, res, now)
		return journal.Save(h.cfg.StateDir, *j)
	case plan.Promote:
		return h.promote(ctx, res, j, d.MemberID)
	case plan.Verify:
		return h.verifyStep(ctx, res, j)
	case plan.StewardRetainPV, plan.ReservePV, plan.UnreservePV, plan.StewardDeletePVC, plan.ReleasePod:
		return h.claimStep(ctx, claim, j, d)
	case plan.Nothing:
		return nil
	}
	return fmt.Errorf("unexpected action %q", d.Action)
}

// begin acquires the Lease and opens (or resumes) the journal.
func (h *Healer) begin(ctx context.Context, res memberstate.Result, req *plan.Request, j *journal.Record, claim *plan.ClaimFacts) error {
	l, err := h.leaseOf(res.Observation.ClusterID)
	if err != nil {
		return err
	}
	// The Lease is taken (again): nothing streamed under an earlier hold
	// is taken as this hold's backup or seed copy.
	if !h.dropEarlyBackup(ctx) {
		return errEarlierStreamLingers
	}
	h.backupCopy = backupCopy{}
	resumed := j.Active()
	next := *j // the record once the Lease is ours: a take that fails changes nothing (but the flag below)
	if !resumed {
		next = h.newRecord(res, req, *j, claim)
	} else if h.backupSeeds(&next) {
		// The Lease may have been another agent's since the backup: its
		// changes may be in the log the learner would replay. Off on disk
		// before the take: no hold runs on a journal that says the backup
		// may still seed (a flag only ever turned off, so a take that then
		// fails loses nothing).
		next.BackupSeeds = false
		if err := journal.Save(h.cfg.StateDir, next); err != nil {
			return fmt.Errorf("%w: turning the pre-change backup's seeding off: %w", errResumeNotSaved, err)
		}
		j.BackupSeeds = false
		h.log.Info("the pre-change backup no longer seeds the learner (the recovery resumes): a seed is streamed after the add")
	}
	info := lease.Info{Target: h.cfg.Member, Phase: string(next.Phase), StartedAt: next.StartedAt}
	if info.Phase == "" {
		info.Phase = string(journal.PhaseStarted)
	}
	if err := l.TryAcquire(ctx, info); err != nil {
		return err
	}
	h.tookLease()
	*j = next
	h.metrics.LeaseHeld.WithLabelValues(h.cfg.Member).Set(1)
	if resumed {
		h.log.Info("recovery resumed", zap.String("id", j.ID), zap.String("phase", string(j.Phase)))
		return h.holdAt(ctx, HoldLeaseAcquired)
	}
	if err := h.advance(ctx, j, journal.PhaseStarted); err != nil {
		return err
	}
	if h.reporter != nil {
		h.reporter.Eventf("Normal", nodereport.ReasonRecoveryStarted, "rejoining member %s (%s): old ID %x, request %s",
			h.cfg.Member, res.Verdict.Reason, uint64(j.OldMemberID), j.Request)
		if req != nil {
			h.clearRequest(ctx)
			j.RequestClearPending = h.clearPending // kept by the next journal write
		}
	}
	return h.holdAt(ctx, HoldLeaseAcquired)
}

// putBackRestarts: were the attempt of open journal j to fail now, it
// would start the member it stopped again (plan.DecidePutBack).
func (h *Healer) putBackRestarts(j journal.Record, o observation.Observation) bool {
	stopped, err := h.runtime.Stopped()
	return plan.DecidePutBack(j, o, stopped || err != nil).Restart
}

// tookLease ends the refusal of a take the API did not answer.
func (h *Healer) tookLease() {
	if h.takeUnanswered {
		h.takeUnanswered, h.lastRefusal = false, ""
		h.blocked(plan.Decision{})
	}
}

// closing is the record an attempt that fails at decision d closes: j,
// or for a Begin that never took the Lease the record it would have
// opened (j is the member's last recovery, closed: never rewritten).
func (h *Healer) closing(j *journal.Record, d plan.Decision, res memberstate.Result, req *plan.Request, claim *plan.ClaimFacts) *journal.Record {
	if j.Active() {
		return j
	}
	var next journal.Record
	switch d.Action {
	case plan.Begin:
		next = h.newRecord(res, req, *j, claim)
	case plan.RollbackLearner:
		next = h.rollbackRecord(*j, d)
	case plan.BeginRestoreClientURLs:
		next = h.restoreRecord(*j, d)
	default:
		return j
	}
	return &next
}

// newRecord is the record a new recovery opens once it holds the Lease;
// prev is the member's last (closed) record.
func (h *Healer) newRecord(res memberstate.Result, req *plan.Request, prev journal.Record, claim *plan.ClaimFacts) journal.Record {
	// No earlier record of this member's state dir at all: one record is
	// kept, so any record (a rejoin, a rollback, a take that never began)
	// may hide an earlier rejoin whose undone changes the stored snapshot
	// would not show.
	firstOnClaim := prev.ID == ""
	now := h.now().UTC()
	next := journal.Record{ID: strconv.FormatInt(now.UnixNano(), 36), Member: h.cfg.Member, Node: h.cfg.Node,
		Request: requestName(req), StartedAt: now, PeerURLs: h.cfg.PeerURLs,
		Failures: prev.Failures, LastFailureAt: prev.LastFailureAt}
	if res.Observation.Local.Match == observation.MatchOK {
		next.OldMemberID = journal.MemberID(res.Observation.Local.ID)
	}
	if req != nil {
		next.MoveTarget, next.MoveFrom = req.Target, req.MoveFrom
		next.MoveMemberID = journal.MemberID(max(req.Replaces, req.Replacement)) // one of them is set, by action
	}
	if claim != nil && next.Request == plan.ActionMoveAway {
		// The claim and PV the move is about, whatever the pod's
		// successors run on later.
		next.MoveClaimUID, next.MovePV = claim.ClaimUID, claim.PV
	}
	if s := h.cfg.StoreSeed; s != nil && firstOnClaim && next.Request != plan.ActionMoveAway {
		// The pod move's stored snapshot seeds the first rejoin on the
		// PV it reserved, and no later one: an older snapshot has more
		// membership changes to replay than the move's own removal.
		next.StoreKey, next.MoveFrom = s.Key, s.From
	}
	return next
}

// TimedPhases are the phases whose durations the Healer records
// (etcd_agent_recovery_phase_duration_seconds): the agent creates their
// series before the first heal (metrics.Init).
var TimedPhases = []string{string(journal.PhaseStopped), string(journal.PhaseSnapshotted), string(journal.PhaseRemoved),
	string(journal.PhaseLearnerAdded), string(journal.PhasePrepared), string(journal.PhaseMemberStarted), string(journal.PhasePromoted)}

// timed runs a step, then advances the journal to phase and records the
// step's duration.
func (h *Healer) timed(j *journal.Record, phase journal.Phase, do func() error) error {
	start := time.Now()
	if err := do(); err != nil {
		return err
	}
	h.metrics.PhaseDuration.WithLabelValues(h.cfg.Member, string(phase)).Observe(time.Since(start).Seconds())
	return h.advance(context.Background(), j, phase)
}

// advance records phase in the journal (fsynced) and on the Lease.
func (h *Healer) advance(ctx context.Context, j *journal.Record, phase journal.Phase) error {
	h.crashBefore(j.ID, phase)
	j.Advance(phase, h.now().UTC())
	if err := journal.Save(h.cfg.StateDir, *j); err != nil {
		return err
	}
	h.log.Info("recovery phase done", zap.String("phase", string(phase)), zap.String("id", j.ID))
	if h.lease != nil && h.lease.Holding() {
		if err := h.lease.SetPhase(ctx, string(phase)); err != nil {
			h.log.Warn("lease phase annotation", zap.Error(err))
		}
	}
	return nil
}
