package heal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// withWALDir gives the rig's member a dedicated WAL dir on the node, with
// a segment in it and member/snap in the data dir (etcd's layout with
// --wal-dir).
func withWALDir(t *testing.T, r *rig) string {
	t.Helper()
	wal := filepath.Join(r.dir, "wal-disk", "etcd-wal")
	for _, d := range []string{wal, filepath.Join(r.h.cfg.DataDir, "member", "snap")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), []byte("wal"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.h.cfg.WALDir = wal
	return wal
}

// Issue 38: the learner started with the removed member's WAL still in its
// dedicated WAL dir ("rejected Raft message to mismatch member" for good).
// The stop step sets the WAL dir aside with the data dir, on the WAL's own
// filesystem, never deleted: the learner's WAL dir is empty and its own.
func TestTheStopQuarantinesADedicatedWALDirWithTheDataDir(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	wal := withWALDir(t, r)
	j := r.runUntilStopped(t, res)
	if _, err := os.Stat(wal); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old member's WAL dir %s is still in place (%v): the learner would start on it", wal, err)
	}
	if j.WALQuarantinePath == "" || !localdisk.SameFilesystem(filepath.Dir(j.WALQuarantinePath), filepath.Dir(wal)) {
		t.Fatalf("WAL quarantined at %q, want on the filesystem of %s", j.WALQuarantinePath, wal)
	}
	if j.QuarantinePath == "" || strings.HasPrefix(j.WALQuarantinePath, j.QuarantinePath) {
		t.Fatalf("data dir quarantined at %q, WAL at %q: want both, apart", j.QuarantinePath, j.WALQuarantinePath)
	}
	if _, err := os.Stat(filepath.Join(j.WALQuarantinePath, "0000000000000000-0000000000000000.wal")); err != nil {
		t.Fatalf("the WAL segment is not kept in the quarantine: %v", err)
	}
}

// A dedicated WAL dir at a mount point is refused before the Lease and the
// stop, nothing touched.
func TestAWALDirAtAMountPointIsRefusedAndNothingStops(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	wal := withWALDir(t, r)
	r.h.mountPoint = func(p string) (bool, error) { return p == wal, nil }
	out := r.h.Consider(context.Background(), res, nil)
	if out.Decision.Reason != plan.ReasonWALDirMountPoint || r.rt.stops != 0 {
		t.Fatalf("decision %+v, %d stops; want refused %s, no stop", out.Decision, r.rt.stops, plan.ReasonWALDirMountPoint)
	}
	if _, err := os.Stat(wal); err != nil {
		t.Fatalf("the WAL dir moved: %v", err)
	}
}

// Seeding builds member/wal in the data dir, which etcd ignores with
// --wal-dir: such a member rejoins in raft mode, with its own reason.
func TestSeedModeFallsBackToRaftWithADedicatedWALDir(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	withWALDir(t, r)
	j := journal.Record{NewMemberID: 0xa9}
	err := r.h.seedDataDir(context.Background(), res, &j, plan.SeedFollower)
	if !errors.Is(err, peerseed.ErrSeedDedicatedWALDir) || peerseed.SeedReason(err) != "dedicated-wal-dir" {
		t.Fatalf("seedDataDir = %v (%s), want %v", err, peerseed.SeedReason(err), peerseed.ErrSeedDedicatedWALDir)
	}
}

// Review (helper 4): a volume mounted at --wal-dir in etcd's container is a
// mount point there though not on the host: refused the same way.
func TestAWALDirThatIsAContainerMountRootIsRefusedAndNothingStops(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	wal := withWALDir(t, r)
	r.h.cfg.WALDirMountRoot = true
	out := r.h.Consider(context.Background(), res, nil)
	if out.Decision.Reason != plan.ReasonWALDirMountPoint || r.rt.stops != 0 {
		t.Fatalf("decision %+v, %d stops; want refused %s, no stop", out.Decision, r.rt.stops, plan.ReasonWALDirMountPoint)
	}
	if _, err := os.Stat(wal); err != nil {
		t.Fatalf("the WAL dir moved: %v", err)
	}
}

// runUntilStopped runs a recovery of res until its journal says stopped
// (the stop step, quarantine included, is done) and returns that journal.
func (r *rig) runUntilStopped(t *testing.T, res memberstate.Result) journal.Record {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.obs.onObserve = func(int) {
		if j := r.journal(t); j.Phase.AtLeast(journal.PhaseStopped) {
			cancel()
		}
	}
	r.h.Consider(ctx, res, nil)
	j := r.journal(t)
	if !j.Phase.AtLeast(journal.PhaseStopped) {
		t.Fatalf("journal phase %s (%s), want stopped", j.Phase, j.Message)
	}
	return j
}

// Review (issue 38): where the WAL dir went was journaled only once the
// whole stop step was done; an agent that died, or a data dir rename that
// failed, right after the WAL's rename left no record of it (rule 8: say
// where the copies are). It is journaled as soon as it is made.
func TestTheWALDirsQuarantineIsJournaledAtOnce(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	withWALDir(t, r)
	r.lease.held, r.lease.renewing = true, true
	r.h.lease = r.lease
	// The data dir's rename then fails: its quarantine lies inside it.
	r.h.cfg.QuarantineDir = filepath.Join(r.h.cfg.DataDir, "q")
	j := journal.Record{ID: "j1", Member: "m1", Node: "node1", Request: "auto", OldMemberID: 0xa1}
	if err := journal.Save(r.h.cfg.StateDir, j); err != nil {
		t.Fatal(err)
	}
	if err := r.h.stopAndQuarantine(context.Background(), res, &j); err == nil {
		t.Fatal("the data dir's rename into a quarantine inside it succeeded")
	}
	saved, _, err := journal.Load(r.h.cfg.StateDir, "m1")
	if err != nil || saved.WALQuarantinePath == "" {
		t.Fatalf("journal on disk: WAL quarantine %q (%v); want the WAL dir's copy named", saved.WALQuarantinePath, err)
	}
	if _, err := os.Stat(saved.WALQuarantinePath); err != nil {
		t.Fatalf("the journaled WAL copy: %v", err)
	}
}
