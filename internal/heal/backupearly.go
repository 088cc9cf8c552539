package heal

// The pre-change backup, streamed while the member stops: the stop decision
// names the member to stream from (plan.stopWithBackup), the stream runs
// beside the stop, and the snapshot step takes it once the core decides on
// that source again (plan: Input.BackupStreamingFrom). It is a read from a
// serving peer under the Lease and changes nothing; the snapshot step waits
// for it, so it ends before any membership change, as the design's step 3
// does. One per attempt; one that fails is dropped and the snapshot step
// streams anew; one no saved journal names is removed when the attempt ends, when
// the Lease is taken again (another agent may have changed the membership
// in a gap: a backup from before it must not seed the learner), or when
// the core chooses another source (a copy of a peer's db, never the
// member's own data).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// earlyBackup is one attempt's backup streaming while its member stops.
type earlyBackup struct {
	recovery string // the journal's ID
	source   uint64
	name     string
	cancel   context.CancelFunc
	done     chan struct{}
	// lingers: a drop waited its whole bound for it to end after its
	// cancel; later drops only look (no poll waits for it again).
	lingers bool
	// snap and err are set before done is closed.
	snap peerseed.Snapshot
	err  error
}

// startEarlyBackup starts streaming the pre-change backup from d.SourceID
// (the stop's decision), once per attempt. Its deadline is the snapshot
// step's own; the attempt's end cancels it (dropEarlyBackup).
func (h *Healer) startEarlyBackup(ctx context.Context, res memberstate.Result, j *journal.Record, d plan.Decision) {
	if d.SourceID == 0 || (h.early != nil && h.early.recovery == j.ID) {
		return
	}
	if !h.dropEarlyBackup(ctx) { // one of an earlier attempt
		return
	}
	src, ok := res.Observation.Member(d.SourceID)
	if !ok || len(src.ClientURLs) == 0 {
		return
	}
	dest, err := h.noteBackupStream(j)
	if err != nil {
		h.log.Warn("no backup streams during the stop: where it would stream could not be journaled", zap.Error(err))
		return
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.stepTimeout(plan.TakeSnapshot))
	e := &earlyBackup{recovery: j.ID, source: src.ID, name: src.Name, cancel: cancel, done: make(chan struct{})}
	h.early = e
	h.log.Info("streaming the pre-change backup while the member stops", zap.String("source", src.Name),
		zap.String("why", d.Detail))
	jv := *j // the loop goes on changing *j
	go func() {
		defer close(e.done)
		e.snap, e.err = h.streamBackup(bctx, src, jv, dest)
		if e.err != nil {
			h.log.Warn("the backup streamed during the stop failed; the snapshot step streams anew", zap.String("source", src.Name), zap.Error(e.err))
		}
	}()
}

// backupStreamingFrom is the member this attempt's early backup streams
// (or streamed, verified) from; 0 when none or it failed.
func (h *Healer) backupStreamingFrom(j journal.Record) uint64 {
	e := h.early
	if e == nil || e.recovery != j.ID || j.Phase.AtLeast(journal.PhaseSnapshotted) {
		return 0
	}
	select {
	case <-e.done:
		if e.err != nil {
			return 0
		}
	default:
	}
	return e.source
}

// takeEarlyBackup waits for this attempt's early backup from source and
// takes it (early: taken; false when there is none or it failed: the step
// streams anew). The wait is the snapshot step's (bounded by ctx, reported
// by the step watch).
func (h *Healer) takeEarlyBackup(ctx context.Context, j *journal.Record, source uint64) (peerseed.Snapshot, bool, error) {
	e := h.early
	if e == nil || e.recovery != j.ID {
		return peerseed.Snapshot{}, false, nil
	}
	if e.source != source {
		// The core chose another source: this one ends first (no two
		// streams of the whole db at once, none writing on through the
		// membership changes). Each retry of this step waits for it again
		// (bounded, logged): the "waited once" mark is for a new hold's
		// take, which must not hold up the agent's loop on every poll.
		e.lingers = false
		if !h.dropEarlyBackup(ctx) {
			return peerseed.Snapshot{}, true, fmt.Errorf("the backup streaming from %s since the stop has not ended after its cancel", e.name)
		}
		return peerseed.Snapshot{}, false, nil
	}
	select {
	case <-e.done:
	default:
		h.log.Info("waiting for the pre-change backup streaming since the stop", zap.String("source", e.name))
		select {
		case <-e.done:
		case <-ctx.Done():
			return peerseed.Snapshot{}, true, fmt.Errorf("waiting for the backup streaming since the stop: %w", ctx.Err())
		}
	}
	if e.err != nil {
		h.early = nil // said when it failed; the step streams anew
		return peerseed.Snapshot{}, false, nil
	}
	return e.snap, true, nil
}

// dropEarlyBackup ends the early backup (the attempt is over, the Lease was
// taken again, or another source was chosen): cancelled, waited for
// (bounded by h.earlyDropWait and ctx, logged), and its file removed unless
// the saved journal names it (the pre-change backup of record). false: it
// did not end meanwhile (it stays, to be dropped again; its own deadline
// ends it).
func (h *Healer) dropEarlyBackup(ctx context.Context) bool {
	e := h.early
	if e == nil {
		return true
	}
	e.cancel()
	select {
	case <-e.done:
	default:
		if e.lingers {
			return false
		}
		h.log.Info("waiting for the backup streaming since the stop to end after its cancel", zap.String("source", e.name),
			zap.Duration("atMost", h.earlyDropWait))
		t := time.NewTimer(h.earlyDropWait)
		defer t.Stop()
		select {
		case <-e.done:
		case <-t.C:
			h.log.Warn("the backup streaming since the stop did not end after its cancel; not waited for again", zap.Duration("waited", h.earlyDropWait))
			e.lingers = true
			return false
		case <-ctx.Done():
			h.log.Warn("the backup streaming since the stop had not ended when the agent stopped waiting", zap.Error(ctx.Err()))
			return false
		}
	}
	h.early = nil
	if e.err != nil {
		return true
	}
	if j, _, err := journal.Load(h.cfg.StateDir, h.cfg.Member); err != nil || j.SnapshotPath == e.snap.Path {
		return true // the backup of record (or the journal unread: kept)
	}
	if e.snap.Copy != "" {
		_ = os.Remove(e.snap.Copy) // the seed's copy of it (a seed stream, transient)
	}
	if err := os.Remove(e.snap.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.log.Warn("could not remove the unused backup streamed during the stop", zap.String("path", e.snap.Path), zap.Error(err))
		return true
	}
	h.log.Info("removed the backup streamed during the stop: no journal names it", zap.String("path", e.snap.Path))
	return true
}
