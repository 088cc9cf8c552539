package heal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// ClaimMover reads and changes, through the Kubernetes API, what a pod
// member's move (plan.ActionMoveAway) frees: its claim, its old PV, a PV on
// the target node, its held pod. Facts never fail: an unread fact is
// plan.ClaimFacts.Err, which Decide waits or refuses on.
type ClaimMover interface {
	Facts(ctx context.Context, target string, j journal.Record, checkStore bool) plan.ClaimFacts
	// Do takes one step (plan.StewardRetainPV, plan.ReservePV,
	// plan.UnreservePV, plan.StewardDeletePVC, plan.ReleasePod) as decided
	// on f: the writes that take or free objects carry a precondition on
	// what f saw (UID, resourceVersion); Retain, which changes no data and
	// only keeps it, is a plain patch.
	Do(ctx context.Context, a plan.Action, j journal.Record, f plan.ClaimFacts) error
}

// claimFactsTimeout bounds the reads behind one look at a move's objects.
const claimFactsTimeout = 10 * time.Second

// claimFacts fills in.Claim for a move-away (a request, or an open journal).
func (h *Healer) claimFacts(ctx context.Context, in *plan.Input, req *plan.Request, j journal.Record) {
	if h.cfg.Claims == nil {
		return
	}
	target := ""
	switch {
	case j.Active() && j.Request == plan.ActionMoveAway:
		target = j.MoveTarget
	case !j.Active() && req != nil && req.Action == plan.ActionMoveAway:
		target = req.Target
	default:
		return
	}
	cctx, cancel := context.WithTimeout(ctx, claimFactsTimeout)
	defer cancel()
	// The store is asked only before anything changed: later, the move's
	// own snapshot is what counts (its upload is a step that fails alone).
	f := h.cfg.Claims.Facts(cctx, target, j, !j.Active() || j.StopAttemptedAt.IsZero())
	f.ClusterID = in.Obs.ClusterID
	in.Claim = &f
}

// claimStep takes a move-away's step on the API objects: its deadline set
// first, then fenced on the Lease for longer than that, right before it
// runs. The claim's deletion is journaled (ClaimReleasedAt): from then on
// the member's future is on the target, whatever this attempt's result.
func (h *Healer) claimStep(ctx context.Context, claim *plan.ClaimFacts, j *journal.Record, d plan.Decision) error {
	if claim == nil {
		return fmt.Errorf("%s: the move's objects were not read", d.Action)
	}
	sctx, cancel := context.WithTimeout(ctx, memberChangeTimeout)
	defer cancel()
	if err := h.fence(sctx, memberChangeTimeout); err != nil {
		return err
	}
	if d.Action == plan.StewardDeletePVC && j.ClaimReleasedAt.IsZero() {
		// Journaled first: a delete applied whose answer is lost still
		// counts (settleMoveAway corrects it from the API if it was not).
		j.ClaimReleasedAt = h.now().UTC()
		if err := journal.Save(h.cfg.StateDir, *j); err != nil {
			return err
		}
	}
	if err := h.cfg.Claims.Do(sctx, d.Action, *j, *claim); err != nil {
		return fmt.Errorf("%s: %w", d.Action, err)
	}
	h.log.Info("move step done", zap.String("step", string(d.Action)), zap.String("detail", d.Detail))
	h.event("Normal", "MoveStep", "move to %s: %s: %s", j.MoveTarget, d.Action, d.Detail)
	return journal.Save(h.cfg.StateDir, *j)
}

// StoreSeed is the stored snapshot a pod move named on the PV it reserved
// (nodereport.AnnotationMoveSeed), parsed.
type StoreSeed struct {
	Key, SHA256 string
	Size        int64
	ClusterID   uint64
	// Removed is the moved member, removed after the snapshot was taken.
	Removed uint64
	// From says which move (for the journal and last-recovery).
	From string
}

// moveSource fills in.MoveSourceGone/Unread for a move-in that has not yet
// added its learner: the source is asked at every decision up to the add.
func (h *Healer) moveSource(ctx context.Context, in *plan.Input, req *plan.Request, j journal.Record) {
	if h.cfg.MoveSourceGone == nil {
		return
	}
	from := ""
	switch {
	case j.Active() && j.Request == plan.ActionMoveIn && !j.Phase.AtLeast(journal.PhaseLearnerAdded):
		from = j.MoveFrom
	case !j.Active() && req != nil && req.Action == plan.ActionMoveIn:
		from = req.MoveFrom
	default:
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gone, err := h.cfg.MoveSourceGone(cctx, from)
	if err != nil {
		in.MoveSourceUnread = err.Error()
		return
	}
	in.MoveSourceGone = gone
}

// moveReleased: a pod move whose claim was released (its deletion asked).
func moveReleased(j journal.Record) bool {
	return j.Request == plan.ActionMoveAway && !j.ClaimReleasedAt.IsZero()
}

// settleMoveAway, for a pod move that fails, makes the journal say what the
// API shows: released (the claim deleting or gone: the member's future is
// on the target, never healed here) or not; and takes back a reservation
// of a move that was not released (a later claim of that name must not
// land on it). Best effort, bounded; what it cannot do it returns.
func (h *Healer) settleMoveAway(ctx context.Context, j *journal.Record) error {
	if h.cfg.Claims == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimFactsTimeout)
	defer cancel()
	f := h.cfg.Claims.Facts(cctx, j.MoveTarget, *j, false)
	if f.Err != "" {
		return fmt.Errorf("the move's objects could not be read to settle it: %s", f.Err)
	}
	settle := plan.SettleMoveAway(f)
	switch {
	case settle.Released && j.ClaimReleasedAt.IsZero():
		j.ClaimReleasedAt = h.now().UTC()
		h.log.Warn("the failed move's claim is released: the member's future is on the target, it is not healed here", zap.String("target", j.MoveTarget))
	case !settle.Released && !j.ClaimReleasedAt.IsZero():
		j.ClaimReleasedAt = time.Time{}
		h.log.Warn("the failed move's claim was not released after all: the member, removed, is healed here as after any removal")
	}
	if settle.Leftover != "" {
		return errors.New(settle.Leftover)
	}
	if !settle.Unreserve {
		return nil
	}
	// A write on the API like every move step: fenced on the Lease for its
	// own timeout right before it; without the Lease it is left, and said.
	uctx, ucancel := context.WithTimeout(cctx, memberChangeTimeout)
	defer ucancel()
	if err := h.fence(uctx, memberChangeTimeout); err != nil {
		return fmt.Errorf("PV %s stays reserved for the claim (the Lease is not ours to take it back: %v); take its claimRef and etcd-agent.io/move-seed off by hand", f.ReservedPV, err)
	}
	if err := h.cfg.Claims.Do(uctx, plan.UnreservePV, *j, f); err != nil {
		return fmt.Errorf("PV %s stays reserved for the claim (take its claimRef and etcd-agent.io/move-seed off by hand): %w", f.ReservedPV, err)
	}
	h.log.Info("the failed move's reservation taken back", zap.String("pv", f.ReservedPV))
	return nil
}
