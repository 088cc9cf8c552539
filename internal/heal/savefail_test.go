package heal

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// writesFail makes every file write of this process fail (RLIMIT_FSIZE:
// EFBIG) until the returned func lifts it: a full disk for the journal,
// while it can still be read. The package's tests do not run in parallel.
func writesFail(t *testing.T) (lift func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: 10, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	lifted := false
	lift = func() {
		if !lifted {
			lifted = true
			if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(lift)
	return lift
}

// saveFailsAfterTake takes the Lease, then makes file writes fail.
type saveFailsAfterTake struct {
	*fakeLease
	t      *testing.T
	lifted *func()
}

func (l saveFailsAfterTake) TryAcquire(ctx context.Context, i lease.Info) error {
	if err := l.fakeLease.TryAcquire(ctx, i); err != nil {
		return err
	}
	*l.lifted = writesFail(l.t)
	return nil
}

// Review (helper 57): a resumed hold clears BackupSeeds (the Lease may have
// been another agent's since the backup), and the saves after the take
// failed. The attempt re-read the journal after the failed step and got the
// flag back, under a Lease it held: the learner could be seeded from a
// backup older than another agent's changes. The flag is now off on disk
// before the take, so the journal read back has it off.
func TestAResumedHoldWhoseSaveFailsNeverSeedsFromItsBackup(t *testing.T) {
	r, gone := resumedPastRemoveWithBackupSeeds(t)
	lift := func() {}
	r.h.newLease = func(uint64) (Lease, error) { return saveFailsAfterTake{r.lease, t, &lift}, nil }
	r.obs.onObserve = func(int) { lift() } // the disk has room again at the next observation
	r.h.Consider(context.Background(), gone, nil)
	if got := r.journal(t); got.BackupSeeds || len(r.cluster.calls) == 0 {
		t.Errorf("after the resume: journal phase %s, backupSeeds %v, changes %v; want the add made with the backup no longer seeding",
			got.Phase, got.BackupSeeds, r.cluster.calls)
	}
}

// A resumed hold clears BackupSeeds on disk before it takes the Lease: a
// flag that cannot be cleared (a full disk) means no take, so no hold ever
// runs on a journal whose saved flag says the backup may still seed (it
// took the Lease on every try, and relied on the re-read's guard).
func TestAResumeWhoseBackupSeedsCannotBeClearedTakesNoLease(t *testing.T) {
	r, gone := resumedPastRemoveWithBackupSeeds(t)
	lift := writesFail(t)
	for range 6 { // more polls than a failing step's tries
		r.h.Consider(context.Background(), gone, nil)
	}
	lift()
	if got := r.journal(t); r.lease.acquires != 0 || len(r.cluster.calls) != 0 || !got.BackupSeeds || !got.Active() {
		t.Errorf("Lease taken %d times, changes %v, journal backupSeeds %v, open %v: want no take while the flag cannot be cleared, the journal open",
			r.lease.acquires, r.cluster.calls, got.BackupSeeds, got.Active())
	}
	// Never held, so nothing failed: a refusal (disk-full), said once, as
	// a resume whose take goes unanswered waits.
	if f, n := testutil.ToFloat64(r.m.RecoveriesTotal.WithLabelValues("m1", journal.ResultFailed)), r.refusals("disk-full"); f != 0 || n != 1 || r.rep.count(nodereport.ReasonRecoveryFailed) != 0 {
		t.Errorf("recoveries failed %v, disk-full refusals %v, RecoveryFailed Events %d: want 0, 1, 0", f, n, r.rep.count(nodereport.ReasonRecoveryFailed))
	}
	r.h.Consider(context.Background(), gone, nil)
	if got := r.journal(t); got.BackupSeeds || len(r.cluster.calls) == 0 {
		t.Errorf("once the disk has room: backupSeeds %v, changes %v; want the add made with the backup no longer seeding", got.BackupSeeds, r.cluster.calls)
	}
}

// Review (helper 57): a backup streamed, and its record (phase snapshotted)
// could not be saved. The attempt streamed again on the journal read back
// and left the first backup, whole and verified, named by no journal (and
// its name, of the same second, made the retry fail as taken). It is
// removed before the retry streams.
func TestABackupWhoseRecordFailedIsRemovedBeforeTheRetryStreams(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	fs := newFakeStreams()
	fs.fail = map[int]bool{1: true} // no early backup: the snapshot step's own
	lift := func() {}
	var first string
	r.h.streamTo = func(ctx context.Context, ep string, c *tls.Config, dest string, n uint64, p func(int64), o ...peerseed.StreamOption) (peerseed.Snapshot, error) {
		s, err := fs.stream(ctx, ep, c, dest, n, p, o...)
		if err == nil && first == "" {
			first = dest
			lift = writesFail(t)
		}
		return s, err
	}
	r.obs.onObserve = func(int) { lift() }
	r.cluster.removeErr = errBoom
	r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	j := r.journal(t)
	if first == "" || j.SnapshotPath == "" {
		t.Fatalf("phase %s after %d streams: want a backup journaled after the failed record", j.Phase, fs.count())
	}
	files, _ := filepath.Glob(filepath.Join(r.h.cfg.QuarantineDir, "snapshot-m1-*.db"))
	if len(files) != 1 || files[0] != j.SnapshotPath {
		t.Errorf("backups %v, the journal names %s: want only the journaled one", files, j.SnapshotPath)
	}
}

// Review (helper 59): a stranded learner found at our add, after our
// backup: removeStranded clears BackupSeeds and its save failed (a full
// disk). The next try found the flag already off in memory and removed the
// learner while the journal on disk still said the backup may seed (the
// re-read kept the flag off in memory). The flag is off on disk before the
// removal: removeStranded saves it first, and the re-read after its failed
// step takes the disk's word (either alone keeps this test green; with
// neither, it fails as above).
func TestAStrandedLearnersRemovalWaitsForBackupSeedsOffOnDisk(t *testing.T) {
	lost := cluster3(memberstate.Lost, 2, 3)
	gone := cluster3(memberstate.Lost, 2, 3)
	gone.Observation.Members = gone.Observation.Members[1:] // our old member is removed
	gone.Observation.Local.Match, gone.Observation.Local.ID = observation.MatchNotFound, 0
	r := newRig(t, lost)
	fs := newFakeStreams()
	r.h.streamTo = fs.stream
	lift, switched := func() {}, false
	r.obs.onObserve = func(int) {
		lift()
		if j, ok, _ := journal.Load(r.dir, "m1"); ok && j.Phase == journal.PhaseRemoved && !switched {
			switched = true
			if !j.BackupSeeds {
				t.Errorf("at the removal: backupSeeds off; this test needs a hold whose backup may seed")
			}
			r.obs.res = []memberstate.Result{withStranded(gone, 10*time.Minute)} // until removed
			lift = writesFail(t)                                                 // the first save of the next step fails
		}
	}
	var onDisk []bool
	r.cluster.onRemove = func() {
		j, _, _ := journal.Load(r.dir, "m1")
		onDisk = append(onDisk, j.BackupSeeds)
		if switched {
			r.obs.mu.Lock()
			r.obs.res = []memberstate.Result{gone}
			r.obs.mu.Unlock()
		}
	}
	core, logs := observer.New(zap.WarnLevel)
	r.h.log = zap.New(core)
	r.h.Consider(context.Background(), lost, nil)
	failed := logs.FilterMessage("recovery step failed").FilterField(zap.String("action", string(plan.RemoveStrandedLearner))).Len()
	if failed == 0 {
		t.Fatalf("the stranded learner's step never failed: this test did not make its save fail")
	}
	if !slices.Contains(r.cluster.removed, strandedID) {
		t.Fatalf("removed %x, calls %v: want the stranded learner removed", r.cluster.removed, r.cluster.calls)
	}
	if len(onDisk) != 2 || onDisk[1] {
		t.Errorf("journal's backupSeeds on disk at each removal (ours, the stranded learner's): %v; want off at the second", onDisk)
	}
}

// Review (helper 60): a move never seeds from its own backup (its seed is
// the store's), so its flag is never saved before the take: a move's resume
// on a full disk takes the Lease as before. (A move's snapshot no longer
// sets the flag either; that is not observable: backupSeeds never lets a
// move seed from its backup.)
func TestAMovesResumeSavesNoSeedingFlagBeforeTheTake(t *testing.T) {
	r, gone := resumedPastRemoveWithBackupSeeds(t)
	j := r.journal(t)
	j.Request = plan.ActionMoveAway
	if err := journal.Save(r.dir, j); err != nil {
		t.Fatal(err)
	}
	lift := writesFail(t)
	r.h.Consider(context.Background(), gone, nil)
	lift()
	if r.lease.acquires == 0 {
		t.Errorf("the Lease was never taken: a move's resume waited on saving a flag it never uses")
	}
}
