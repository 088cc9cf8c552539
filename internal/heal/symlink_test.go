package heal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// linkedDataDir makes the rig's data dir a symlink to a dir elsewhere (a
// dedicated disk's path) holding entries, and returns the link's target.
func linkedDataDir(t *testing.T, r *rig, entries ...string) string {
	t.Helper()
	target := filepath.Join(t.TempDir(), "disk", "etcd")
	for _, e := range append([]string{"."}, entries...) {
		if err := os.MkdirAll(filepath.Join(target, e), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(r.h.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, r.h.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	return target
}

// Issue 38: a data dir that is a symlink (/var/lib/etcd -> a dedicated
// disk) had the link itself renamed into the quarantine: the member's data
// stayed on the disk, unquarantined, and the learner started in a new dir at
// the link's path, on the root disk. Now the link and its target stay: the
// target's member/ is set aside inside it (on the disk), as for a volume's
// root, and the learner starts through the same link.
func TestASymlinkedDataDirKeepsItsLinkAndItsDisk(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	target := linkedDataDir(t, r, "member/wal", "member/snap")
	j := r.runUntilStopped(t, res)
	if got, err := os.Readlink(r.h.cfg.DataDir); err != nil || got != target {
		t.Fatalf("the data dir's link is now %q (%v), want it kept pointing at %s", got, err, target)
	}
	if want := filepath.Join(target, "etcd-agent-quarantine"); filepath.Dir(j.QuarantinePath) != want &&
		!strings.HasPrefix(j.QuarantinePath, filepath.Join(r.h.cfg.DataDir, "etcd-agent-quarantine")) {
		t.Fatalf("member data set aside at %q, want inside the link's target (%s)", j.QuarantinePath, want)
	}
	if _, err := os.Stat(filepath.Join(target, "member")); !os.IsNotExist(err) {
		t.Fatalf("member/ still in the link's target: %v", err)
	}
	if _, err := os.Stat(filepath.Join(j.QuarantinePath, "wal")); err != nil {
		t.Fatalf("member/wal not kept in the quarantine: %v", err)
	}
}

// Issue 38: a data dir that is a symlink whose target is gone (the disk it
// points to is not mounted) is refused before the Lease with its own
// reason: the member's data is most likely on that disk, and a learner could
// not start through the dangling link either.
func TestADanglingDataDirLinkIsRefused(t *testing.T) {
	res := lostWith("missing")
	r := newRig(t, res)
	target := linkedDataDir(t, r)
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	out := r.h.Consider(context.Background(), res, nil)
	if out.Decision.Reason != plan.ReasonDataDirLinkDangling || r.rt.stops != 0 {
		t.Fatalf("decision %+v, %d stops; want refused %s, no stop", out.Decision, r.rt.stops, plan.ReasonDataDirLinkDangling)
	}
	if got, err := os.Readlink(r.h.cfg.DataDir); err != nil || got != target {
		t.Fatalf("the dangling link was touched: %q, %v", got, err)
	}
}

// A symlinked WAL dir is refused before the stop: etcd's wal.Create would
// remove the link and put the learner's WAL beside it, off its disk.
func TestASymlinkedWALDirIsRefusedAndNothingStops(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	wal, target := linkedWALDir(t, r)
	out := r.h.Consider(context.Background(), res, nil)
	if out.Decision.Reason != plan.ReasonWALDirSymlink || r.rt.stops != 0 {
		t.Fatalf("decision %+v, %d stops; want refused %s, no stop", out.Decision, r.rt.stops, plan.ReasonWALDirSymlink)
	}
	if got, err := os.Readlink(wal); err != nil || got != target {
		t.Fatalf("the WAL dir's link was touched: %q, %v", got, err)
	}
}

// Seeding renames a built data dir into place, which would replace the
// link: a symlinked data dir rejoins in raft mode, with its own reason.
func TestSeedModeFallsBackToRaftWithASymlinkedDataDir(t *testing.T) {
	res := lostWith("empty")
	res.Observation.ClusterID = 0xc1
	for i := range res.Observation.Members {
		res.Observation.Members[i].Version = "3.6.16"
	}
	r := newRig(t, res)
	linkedDataDir(t, r)
	j := journal.Record{NewMemberID: 0xa9}
	err := r.h.seedDataDir(context.Background(), res, &j, plan.SeedFollower)
	if !errors.Is(err, peerseed.ErrSeedDataDirSymlink) || peerseed.SeedReason(err) != "data-dir-symlink" {
		t.Fatalf("seedDataDir = %v (%s), want %v", err, peerseed.SeedReason(err), peerseed.ErrSeedDataDirSymlink)
	}
	if _, err := os.Readlink(r.h.cfg.DataDir); err != nil {
		t.Fatalf("the data dir's link is gone: %v", err)
	}
}

// Review (issue 38): `etcd-agent status` decided without the layout facts
// (a WAL dir at a mount point or a symlink, a symlinked data dir) and said
// "begin" where the agent refuses. LayoutFacts gives a decision made
// without a healer the same facts.
func TestLayoutFactsAreTheHealersFacts(t *testing.T) {
	res := lostWith("corrupt")
	r := newRig(t, res)
	linkedWALDir(t, r)
	linkedDataDir(t, r, "member/snap")
	var in plan.Input
	LayoutFacts(&in, r.h.cfg)
	if !in.WALDirDedicated || !in.WALDirSymlink || !in.DataDirSymlink {
		t.Fatalf("facts %+v: want a dedicated, symlinked WAL dir and a symlinked data dir", in)
	}
	cfg := r.h.cfg
	cfg.WALDirMountRoot = true
	in = plan.Input{}
	LayoutFacts(&in, cfg)
	if !in.WALDirMountPoint {
		t.Fatal("a WAL dir at etcd's container mount root is not a mount point to the decision")
	}
}

// linkedWALDir gives the rig a dedicated WAL dir that is a symlink to the
// dir holding the WAL, and returns both.
func linkedWALDir(t *testing.T, r *rig) (link, target string) {
	t.Helper()
	link = withWALDir(t, r)
	target = link + "-disk"
	if err := os.Rename(link, target); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return link, target
}
