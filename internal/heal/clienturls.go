package heal

import (
	"context"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// restoreClientURLs restarts the promoted member on its own client URLs
// (plan.decideRestoreClientURLs): leadership handed off first, the Lease
// proven right before the manifest is rewritten in place (the kubelet
// restarts etcd on it; a plain start puts back what the annotation kept).
func (h *Healer) restoreClientURLs(ctx context.Context, res memberstate.Result, j *journal.Record, d plan.Decision) error {
	if err := h.handOffLeadership(ctx, res, d.MemberID); err != nil {
		h.log.Warn("leadership hand-off before the restart failed; the cluster will elect a new leader", zap.Error(err))
	}
	if err := h.fence(ctx, memberChangeTimeout); err != nil {
		return err
	}
	ic := h.initialCluster(res.Observation, j)
	if err := h.runtime.Start(ctx, ic); err != nil {
		return fmt.Errorf("restart member on its own client URLs (%s): %w", h.runtime.Describe(), err)
	}
	j.ClientURLsRestoredAt = h.now().UTC()
	h.log.Info("member promoted: restarted on its own client URLs", zap.String("wasOn", j.ClientURLsAside), zap.String("id", fmtID(d.MemberID)))
	return journal.Save(h.cfg.StateDir, *j)
}

// beginRestoreClientURLs opens a record of its own for the restart of the
// member on its own client URLs (plan.decideIdleRestore) once the Lease is
// ours: the member is a serving voter, only its flags change.
func (h *Healer) beginRestoreClientURLs(ctx context.Context, res memberstate.Result, j *journal.Record, d plan.Decision) error {
	l, err := h.leaseOf(res.Observation.ClusterID)
	if err != nil {
		return err
	}
	next := h.restoreRecord(*j, d)
	info := lease.Info{Target: h.cfg.Member, Phase: journal.KindRestoreClientURLs, StartedAt: next.StartedAt}
	if err := l.TryAcquire(ctx, info); err != nil {
		return err
	}
	*j = next
	h.tookLease()
	h.metrics.LeaseHeld.WithLabelValues(h.cfg.Member).Set(1)
	h.log.Warn("the member serves with its client URLs set aside by an earlier rejoin: restarting it on its own",
		zap.String("id", j.ID), zap.String("member", fmtID(d.MemberID)), zap.String("private", j.ClientURLsAside), zap.String("detail", d.Detail))
	return h.advance(ctx, j, journal.PhaseStarted)
}

// restoreRecord is the record a restart on the member's own client URLs
// opens. prev is the member's last (closed) record: its failure count
// (the backoff), the paths that keep their quarantined copies from
// pruning and a request's pending clear are kept.
func (h *Healer) restoreRecord(prev journal.Record, d plan.Decision) journal.Record {
	now := h.now().UTC()
	next := journal.Record{ID: strconv.FormatInt(now.UnixNano(), 36), Member: h.cfg.Member, Node: h.cfg.Node,
		Request: "auto", Kind: journal.KindRestoreClientURLs, NewMemberID: journal.MemberID(d.MemberID),
		StartedAt: now, PeerURLs: h.cfg.PeerURLs, Failures: prev.Failures, LastFailureAt: prev.LastFailureAt,
		QuarantinePath: prev.QuarantinePath, WALQuarantinePath: prev.WALQuarantinePath, SnapshotPath: prev.SnapshotPath,
		RequestClearPending: prev.RequestClearPending}
	if s, ok := h.runtime.(memberruntime.ClientURLsSetter); ok {
		next.ClientURLsAside, _, _ = s.ClientURLsAside() // the verify waits until the member no longer names it
	}
	return next
}

// closeRestore closes a restart record: succeeded once the member serves
// on its own URLs (verified), refused when a rule said no before any
// restart, failed otherwise (a step that failed: counted for the backoff
// of the next try). It is not a recovery of the member: no
// recoveries_total, no request answered.
func (h *Healer) closeRestore(ctx context.Context, j *journal.Record, d plan.Decision, failed bool) Outcome {
	now := h.now().UTC()
	result := plan.ResultOfRestore(d, *j, failed)
	if result == journal.ResultFailed {
		j.Failures, j.LastFailureAt = j.Failures+1, now
	}
	j.Result, j.Reason, j.Message, j.FinishedAt = result, string(d.Reason), d.Detail, now
	phase := j.Phase
	j.Advance(journal.PhaseDone, now)
	if err := journal.Save(h.cfg.StateDir, *j); err != nil {
		h.log.Error("close journal", zap.Error(err))
	}
	h.releaseLease(ctx)
	h.log.Info("restart on the member's own client URLs closed", zap.String("id", j.ID), zap.String("result", result),
		zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail), zap.Duration("took", now.Sub(j.StartedAt)))
	if h.reporter != nil {
		if err := h.reporter.SetLastRecovery(ctx, nodereport.LastRecovery{Request: journal.KindRestoreClientURLs, Result: result,
			Reason: string(d.Reason), Phase: string(phase), StartedAt: j.StartedAt, FinishedAt: now, Message: d.Detail}); err != nil {
			h.log.Warn("last-recovery annotation", zap.Error(err))
		}
	}
	return Outcome{Decision: d, Result: result}
}

// clientURLsInput tells Decide whether a learner's client URLs can be set
// aside here, and whether the member's are now.
func (h *Healer) clientURLsInput(in *plan.Input) {
	s, ok := h.runtime.(memberruntime.ClientURLsSetter)
	if !ok {
		return
	}
	err := s.CanSetClientURLsAside()
	in.CanSetClientURLsAside = err == nil
	if err != nil {
		h.log.Debug("a learner's client URLs cannot be set aside here", zap.Error(err))
	}
	_, aside, err := s.ClientURLsAside()
	if err != nil {
		h.log.Warn("cannot tell whether the member's client URLs are set aside", zap.Error(err))
	}
	in.ClientURLsAside = aside
}
