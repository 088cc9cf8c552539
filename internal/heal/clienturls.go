package heal

import (
	"context"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
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
	now := h.now().UTC()
	next := journal.Record{ID: strconv.FormatInt(now.UnixNano(), 36), Member: h.cfg.Member, Node: h.cfg.Node,
		Request: "auto", Kind: journal.KindRestoreClientURLs, NewMemberID: journal.MemberID(d.MemberID),
		StartedAt: now, PeerURLs: h.cfg.PeerURLs, Failures: j.Failures, LastFailureAt: j.LastFailureAt}
	info := lease.Info{Target: h.cfg.Member, Phase: journal.KindRestoreClientURLs, StartedAt: now}
	if err := l.TryAcquire(ctx, info); err != nil {
		return err
	}
	*j = next
	h.tookLease()
	h.metrics.LeaseHeld.WithLabelValues(h.cfg.Member).Set(1)
	h.log.Warn("the member serves with its client URLs set aside by an earlier rejoin: restarting it on its own",
		zap.String("id", j.ID), zap.String("member", fmtID(d.MemberID)), zap.String("detail", d.Detail))
	return h.advance(ctx, j, journal.PhaseStarted)
}
