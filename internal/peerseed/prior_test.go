package peerseed

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// A pod move's seed (issue 15): a snapshot taken before the moved member's
// removal and the learner's add. WithoutMember takes the member out of the
// copy's membership and ConfState and records it as removed, as its removal
// leaves them; WithLearner then writes the learner in. Without it, a member
// of the snapshot (here the fixture's learner, standing for the moved
// member) is refused; the copy is taken only when its membership is the one
// expected; the stored snapshot itself is never written.
func TestWithoutMemberTakesTheMovedMemberOutAsItsRemovalWould(t *testing.T) {
	fx := getSeedFixture(t)
	lg := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	moved, newID := fx.learner, fx.learner^0x5a5a5a5a
	url := freeURLs(t, 1)[0]
	before := fileSHA256(t, fx.db)
	dir := t.TempDir()
	// Without WithoutMember: the snapshot's learner (the moved member) and
	// ours would be two.
	if _, err := BuildDataDir(fx.db, filepath.Join(dir, "a"), newID, fx.cluster, lg, WithLearner([]string{url})); !errors.Is(err, ErrSeedMembershipDiffers) {
		t.Fatalf("without WithoutMember: %v, want %v", err, ErrSeedMembershipDiffers)
	}
	// The expected membership still naming the moved member: refused.
	members := dbMembers(t, fx.db)
	var expect, stale []ExpectedMember
	for _, m := range members {
		e := ExpectedMember{ID: uint64(m.ID), PeerURLs: m.PeerURLs, IsLearner: m.IsLearner}
		stale = append(stale, e)
		if uint64(m.ID) != moved {
			expect = append(expect, e)
		}
	}
	expect = append(expect, ExpectedMember{ID: newID, PeerURLs: []string{url}, IsLearner: true})
	stale = append(stale, ExpectedMember{ID: newID, PeerURLs: []string{url}, IsLearner: true})
	if _, err := BuildDataDir(fx.db, filepath.Join(dir, "b"), newID, fx.cluster, lg, WithoutMember(moved), WithLearner([]string{url}), ExpectMembership(stale)); !errors.Is(err, ErrSeedMembershipDiffers) {
		t.Fatalf("with the moved member still expected: %v, want %v", err, ErrSeedMembershipDiffers)
	}
	dataDir := filepath.Join(dir, "c")
	info, err := BuildDataDir(fx.db, dataDir, newID, fx.cluster, lg, WithoutMember(moved), WithLearner([]string{url}), ExpectMembership(expect))
	if err != nil {
		t.Fatal(err)
	}
	if !info.LearnerWritten || !slices.Equal(info.ConfState.Learners, []uint64{newID}) || slices.Contains(info.ConfState.Voters, moved) || info.Members != len(members) {
		t.Fatalf("seed info %+v: want the moved member out, learner %x in, %d members", info, newID, len(members))
	}
	be := backend.NewDefaultBackend(lg, filepath.Join(dataDir, "member", "snap", "db"))
	defer be.Close()
	cl := membership.NewCluster(lg)
	cl.SetBackend(schema.NewMembershipBackend(lg, be))
	cl.UnsafeLoad()
	if !cl.IsIDRemoved(types.ID(moved)) || cl.Member(types.ID(moved)) != nil {
		t.Fatalf("the moved member %x is not recorded as removed in the seeded db", moved)
	}
	if got := fileSHA256(t, fx.db); got != before {
		t.Fatal("the stored snapshot was written: only the copy may be")
	}
}

// dbMembers is the membership stored in a db (opened on a copy).
func dbMembers(t *testing.T, db string) []*membership.Member {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "db")
	if _, _, err := copyFile(db, cp, nil); err != nil {
		t.Fatal(err)
	}
	lg := zap.NewNop()
	be := backend.NewDefaultBackend(lg, cp)
	defer be.Close()
	cl := membership.NewCluster(lg)
	cl.SetBackend(schema.NewMembershipBackend(lg, be))
	cl.UnsafeLoad()
	return cl.Members()
}
