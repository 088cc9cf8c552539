package heal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
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

// Issue 38: a data dir at a volume's root (a mount point, or a PV's path)
// holding etcd data was refused (before: data-dir-mount-point), and a PV
// root that is no mount point was renamed away, which a local PV cannot
// mount again. Its contents are set aside instead: member/ moves into an
// etcd-agent-quarantine dir inside it (the same volume, never deleted), the
// data dir stays where it is and the learner starts in it.
func TestAVolumeRootsEtcdDataIsSetAsideInsideIt(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(r *rig)
	}{
		{"mount point", func(r *rig) { mountedDataDir(t, r, "member/wal", "lost+found") }},
		{"a PV's root", func(r *rig) {
			mountedDataDir(t, r, "member/wal", "lost+found")
			r.h.mountPoint = func(string) (bool, error) { return false, nil }
			r.h.cfg.DataDirVolumeRoot = true
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := lostWith("corrupt")
			r := newRig(t, res)
			c.set(r)
			j := r.runUntilStopped(t, res)
			want := filepath.Join(r.h.cfg.DataDir, "etcd-agent-quarantine")
			if filepath.Dir(j.QuarantinePath) != want {
				t.Fatalf("member data set aside at %q, want inside %s", j.QuarantinePath, want)
			}
			if _, err := os.Stat(filepath.Join(j.QuarantinePath, "wal")); err != nil {
				t.Fatalf("member/wal not kept in the quarantine: %v", err)
			}
			for _, gone := range []string{"member"} {
				if _, err := os.Stat(filepath.Join(r.h.cfg.DataDir, gone)); !os.IsNotExist(err) {
					t.Fatalf("%s still in the data dir: %v", gone, err)
				}
			}
			if _, err := os.Stat(filepath.Join(r.h.cfg.DataDir, "lost+found")); err != nil {
				t.Fatalf("what etcd does not read moved too: %v", err)
			}
		})
	}
}
