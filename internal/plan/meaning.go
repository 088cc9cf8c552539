package plan

import "github.com/etcd-agent/etcd-agent/internal/record"

// What a decision asks of the executor, said here so that no code outside
// plan branches on a Reason (docs/design.md §6, "The executor's loop"):
// the shell asks these, and a reason's meaning changes in one place.

// HasReason reports whether d says why (a wait, a refusal, an end that is
// not a plain success).
func (d Decision) HasReason() bool { return d.Reason != ReasonNone }

// LeaseTakenByOther: another agent holds the recovery Lease; an open
// journal of ours stops at once and stays open to resume.
func (d Decision) LeaseTakenByOther() bool { return d.Reason == ReasonLeaseHeldByOther }

// WaitsForAPI: the Lease cannot be read (the API does not answer).
func (d Decision) WaitsForAPI() bool { return d.Reason == ReasonAPIUnavailable }

// WaitsForMoveTarget: a pod move released its member to the target; the
// rest is the target agent's, without this agent's Lease.
func (d Decision) WaitsForMoveTarget() bool { return d.Reason == ReasonAwaitingMoveTarget }

// RolledBackLearner: a stranded learner was removed; the member's own
// state is considered again at once.
func (d Decision) RolledBackLearner() bool { return d.Reason == ReasonLearnerRolledBack }

// MovedAway: the member was moved off this node; its manifest is set
// aside if it was not yet.
func (d Decision) MovedAway() bool { return d.Reason == ReasonMovedAway }

// DryRun: the decision would act but --dry-run holds it.
func (d Decision) DryRun() bool { return d.Reason == ReasonDryRun }

// BlockedOn is the reason the agent counts itself blocked on since it
// first saw it (etcd_agent_refused_since_seconds): a refusal, or an open
// journal waiting for a Lease it cannot take or read; ReasonNone else.
func (d Decision) BlockedOn() Reason {
	if d.Action == Refuse || d.LeaseTakenByOther() || d.WaitsForAPI() {
		return d.Reason
	}
	return ReasonNone
}

// ResultOfFinish is the result a rejoin closes with at Finish: refused
// when a reason ended it before anything was changed (rule 6's re-check,
// a refusal after the Lease and before the stop: no failure counted, no
// backoff), failed for any other reason, succeeded without one.
func ResultOfFinish(d Decision, j record.Record) string {
	switch {
	case d.HasReason() && !j.Phase.AtLeast(record.PhaseStopped) && j.StopAttemptedAt.IsZero():
		return record.ResultRefused
	case d.HasReason():
		return record.ResultFailed
	}
	return record.ResultSucceeded
}

// ResultOfRollback is the result a stranded learner's rollback closes
// with: succeeded when the learner is gone, refused when nothing was
// changed, failed otherwise.
func ResultOfRollback(d Decision, j record.Record) string {
	switch {
	case d.RolledBackLearner():
		return record.ResultSucceeded
	case !j.Phase.AtLeast(record.PhaseRemoved):
		return record.ResultRefused
	}
	return record.ResultFailed
}

// ResultOfRestore is the result a client-URL restore closes with: failed
// when a step failed, succeeded when verified without a reason, refused
// when the URLs were never restored, failed otherwise.
func ResultOfRestore(d Decision, j record.Record, failed bool) string {
	switch {
	case failed:
		return record.ResultFailed
	case !d.HasReason() && j.Phase.AtLeast(record.PhaseVerified):
		return record.ResultSucceeded
	case j.ClientURLsRestoredAt.IsZero():
		return record.ResultRefused
	}
	return record.ResultFailed
}

// Quiet: the manifest is in place and nothing is to be said of it.
func (m ManifestRestore) Quiet() bool { return m.Reason == ReasonNone && !m.Missing }

// CannotPutBack: the skeleton is wanted and there is no way to make it;
// etcd's purge may end the member (said as a warning).
func (d SkeletonDecision) CannotPutBack() bool {
	switch d.Reason {
	case SkeletonMountRootGone, SkeletonParentGone, SkeletonLookFailed, SkeletonJournalUnread, SkeletonNotADirectory:
		return true
	}
	return false
}

// DryRun: the skeleton would be made but --dry-run holds it.
func (d SkeletonDecision) DryRun() bool { return d.Reason == SkeletonDryRun }

// StartsWithStartFlags: the gate let a learner start that the agent
// prepared, or that a person added and named in the start file; only such
// a start takes the rejoin flags (docs/design.md §6, rule 9). Any other
// pass runs etcd exactly as judged.
func (v GateVerdict) StartsWithStartFlags() bool {
	return v.Pass && (v.Reason == GatePrepared || v.Reason == GateLearnerStartFlags)
}

// AnswersADryRun: an answer's reason (a last-recovery's, as written by the
// agent) says the request was planned, not carried out (--dry-run).
func AnswersADryRun(reason string) bool { return Reason(reason) == ReasonDryRun }
