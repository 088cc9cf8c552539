package heal

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/journal"
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
