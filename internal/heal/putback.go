package heal

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// putBackTimeout bounds the restart of a member a failed attempt stopped
// (Start does not wait for the member to serve).
// putBackObserveTimeout bounds the fresh observation it decides on (the
// deep data dir check included).
const (
	putBackTimeout        = 10 * time.Second
	putBackObserveTimeout = time.Minute
)

// putBack, when an attempt fails: a member this attempt stopped goes back
// to running as it was if plan.DecidePutBack says so (never removed, data
// intact); otherwise it stays stopped and the journal, the log and an Event
// say why. Recorded in j.PutBack (the caller saves the journal).
func (h *Healer) putBack(ctx context.Context, j *journal.Record) {
	if j.StopAttemptedAt.IsZero() {
		return // never stopped: nothing to put back, nothing to say
	}
	ctx = context.WithoutCancel(ctx) // an agent shutting down still puts the member back
	stopped, err := h.runtime.Stopped()
	if err != nil {
		// Unknown: try the start (idempotent) rather than leave it stopped.
		h.log.Warn("cannot tell whether the member is stopped; assuming it is", zap.Error(err))
		stopped = true
	}
	// The fresh observation (probes, the deep data dir check) and the
	// start each have their own budget: a slow observation must not leave
	// the start no time.
	octx, cancel := context.WithTimeout(ctx, putBackObserveTimeout)
	res := h.obs.Observe(octx, h.now())
	cancel()
	ctx, cancel = context.WithTimeout(ctx, putBackTimeout)
	defer cancel()
	pb := plan.DecidePutBack(*j, res.Observation, stopped)
	log := h.log.With(zap.String("id", j.ID), zap.String("phase", string(j.Phase)), zap.String("why", pb.Reason))
	if pb.Restart {
		ic := h.initialCluster(res.Observation, j)
		if err := h.runtime.Start(ctx, ic); err != nil {
			j.PutBack = "restart failed: " + err.Error() + " (" + pb.Reason + ")"
			log.Error("the failed attempt could not restart the member it stopped", zap.Error(err), zap.String("runtime", h.runtime.Describe()))
			h.event("Warning", nodereport.ReasonMemberLeftStopped, "member %s: %s", h.cfg.Member, j.PutBack)
			return
		}
		j.PutBack = "restarted: " + pb.Reason
		log.Info("failed attempt: member restarted as it was", zap.String("runtime", h.runtime.Describe()))
		h.event("Normal", nodereport.ReasonMemberRestarted, "member %s: %s", h.cfg.Member, j.PutBack)
		return
	}
	j.PutBack = "left stopped: " + pb.Reason
	if !stopped {
		log.Info("failed attempt: the member runs; nothing to put back")
		return
	}
	log.Warn("failed attempt: the member stays stopped")
	h.event("Warning", nodereport.ReasonMemberLeftStopped, "member %s: %s", h.cfg.Member, j.PutBack)
}

func (h *Healer) event(etype, reason, format string, args ...any) {
	if h.reporter != nil {
		h.reporter.Eventf(etype, reason, format, args...)
	}
}

// putBackAfterUnreadLeases ends an open journal that has waited for
// plan.MaxStepErrors polls in a row on a Lease it cannot read (the API fully
// down after the agent restarted mid-stop) while the member it parked has
// its data intact and was never removed: the attempt fails and the member
// is started again as it was (putBack), as after as many unanswered takes.
// Starting a member with its own data under its own ID changes no
// membership, so it needs no Lease; the next attempt (after backoff, once
// the API is back) begins anew. ended: the journal was closed.
func (h *Healer) putBackAfterUnreadLeases(ctx context.Context, j *journal.Record, d plan.Decision, res memberstate.Result) (Outcome, bool) {
	polls, giveUp := plan.AfterUnreadLease(h.unreadLeasePolls, j.Active(), d, d.WaitsForAPI() && j.Active() && h.putBackRestarts(*j, res.Observation))
	h.unreadLeasePolls = polls
	if !giveUp {
		return Outcome{}, false
	}
	cause := fmt.Errorf("the recovery Lease could not be read on %d polls in a row (%s): the member this attempt stopped, its data intact and never removed, is not left stopped for the outage", plan.MaxStepErrors, d.Detail)
	h.log.Warn("giving up the resumed recovery while the Lease cannot be read", zap.String("id", j.ID), zap.String("phase", string(j.Phase)), zap.Error(cause))
	return h.fail(ctx, j, plan.Decision{Action: plan.Finish, Reason: plan.ReasonAPIUnavailable, Detail: cause.Error()}, cause), true
}
