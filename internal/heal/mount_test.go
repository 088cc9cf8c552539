package heal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// lostWith: member 1 lost (not serving) with its data dir of class.
func lostWith(class string) memberstate.Result {
	res := cluster3(memberstate.Lost, 2, 3)
	res.Observation.Local.DataDirClass = class
	return res
}

// mountedDataDir makes the rig's data dir (with entries) and has the
// Healer see it as a mount point (making one needs root).
func mountedDataDir(t *testing.T, r *rig, entries ...string) {
	t.Helper()
	for _, e := range entries {
		if err := os.MkdirAll(filepath.Join(r.h.cfg.DataDir, e), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	r.h.mountPoint = func(p string) (bool, error) { return p == r.h.cfg.DataDir, nil }
}

// Issue 10 item 4, UC1 on a dedicated disk: the new node's data dir is an
// empty mount point (a fresh filesystem's lost+found in it). There is
// nothing to quarantine and it cannot be renamed: the stop step leaves it
// in place and goes on. Before, the rename was tried (EBUSY on a real
// mount: the step failed five times and the attempt with it).
func TestEmptyMountPointDataDirIsLeftInPlace(t *testing.T) {
	res := lostWith("empty")
	r := newRig(t, res)
	mountedDataDir(t, r, "lost+found")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.obs.onObserve = func(n int) {
		if j := r.journal(t); j.Phase.AtLeast(journal.PhaseStopped) {
			cancel()
		}
	}
	r.h.Consider(ctx, res, nil)
	j := r.journal(t)
	if !j.Phase.AtLeast(journal.PhaseStopped) || j.QuarantinePath != "" {
		t.Fatalf("journal phase %s, quarantine %q (%s); want stopped with nothing quarantined", j.Phase, j.QuarantinePath, j.Message)
	}
	if _, err := os.Stat(filepath.Join(r.h.cfg.DataDir, "lost+found")); err != nil {
		t.Fatalf("the mount point's contents moved: %v", err)
	}
}

// A mount point holding etcd data is refused before the Lease and the
// stop, with its own reason.
func TestMountPointWithEtcdDataIsRefusedBeforeTheStop(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	mountedDataDir(t, r, "member/wal")
	out := r.h.Consider(context.Background(), res, nil)
	if out.Decision.Reason != plan.ReasonDataDirMountPoint || r.rt.stops != 0 {
		t.Fatalf("decision %+v, %d stops; want refused %s, no stop", out.Decision, r.rt.stops, plan.ReasonDataDirMountPoint)
	}
	if _, err := os.Stat(filepath.Join(r.h.cfg.DataDir, "member", "wal")); err != nil {
		t.Fatalf("the data moved: %v", err)
	}
}
