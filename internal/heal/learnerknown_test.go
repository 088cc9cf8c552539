package heal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// A learner whose data dir has no WAL takes its member ID from the first
// peer that answers: a voter still behind on the remove would hand it the
// removed member's old ID (seen in the lab's 2.3 GiB bench, the leader 11 s
// behind its follower). The start waits until every voter lists the new
// learner at our peer URL and nothing else there; past the bound it fails
// without starting.
func TestALearnerIsNotStartedWhileAVoterStillListsItsOldID(t *testing.T) {
	startMember := func(t *testing.T, r *rig, serving ...int) (journal.Record, error) {
		if len(serving) == 0 {
			serving = []int{2, 3}
		}
		clock := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
		r.lease.held, r.lease.renewing = true, true
		r.h.lease = r.lease
		j := journal.Record{ID: "j1", Member: "m1", Node: "node1", Request: "auto", StartedAt: clock, OldMemberID: 0xa1,
			NewMemberID: 0xa9, PeerURLs: []string{peerURL(1)}}
		j.Advance(journal.PhaseRemoved, clock)
		j.Advance(journal.PhaseLearnerAdded, clock)
		j.Advance(journal.PhasePrepared, clock)
		err := r.h.step(context.Background(), cluster3(memberstate.Lost, serving...), nil, &j, plan.Decision{Action: plan.StartMember}, nil)
		return j, err
	}
	stale := []plan.ListedMember{{ID: 0xa2, PeerURLs: []string{peerURL(2)}}, {ID: 0xa1, PeerURLs: []string{peerURL(1)}}}
	fresh := []plan.ListedMember{{ID: 0xa2, PeerURLs: []string{peerURL(2)}}, {ID: 0xa9, PeerURLs: []string{peerURL(1)}}}

	// m3StaysBehind: a rig where m3 lists the old member for good, and a
	// short bound.
	m3StaysBehind := func(t *testing.T) *rig {
		r := newRig(t)
		w := learnerKnownWait
		t.Cleanup(func() { learnerKnownWait = w })
		learnerKnownWait = 300 * time.Millisecond
		r.cluster.listOf = func(ep string) ([]plan.ListedMember, error) {
			if strings.Contains(ep, "10.0.0.3") {
				return stale, nil
			}
			return fresh, nil
		}
		return r
	}
	t.Run("a voter catches up", func(t *testing.T) {
		r := newRig(t)
		var asked atomic.Int32
		r.cluster.listOf = func(ep string) ([]plan.ListedMember, error) {
			if strings.Contains(ep, "10.0.0.3") && asked.Add(1) <= 3 {
				if r.rt.starts > 0 {
					t.Error("the member started while a voter still listed its old ID")
				}
				return stale, nil
			}
			return fresh, nil
		}
		if _, err := startMember(t, r); err != nil {
			t.Fatal(err)
		}
		if r.rt.starts != 1 || asked.Load() < 4 {
			t.Fatalf("started %d times after %d answers of the lagging voter, want once after it caught up", r.rt.starts, asked.Load())
		}
	})
	t.Run("a voter stays behind", func(t *testing.T) {
		r := m3StaysBehind(t)
		_, err := startMember(t, r)
		if err == nil || !strings.Contains(err.Error(), "m3 still lists member a1") {
			t.Fatalf("%v, want a failed start naming the lagging voter", err)
		}
		if r.rt.starts != 0 {
			t.Fatal("the member was started while a voter still listed its old ID")
		}
	})
	// From the review: etcd asks every member --initial-cluster names, not
	// only those that serve; one that is behind on applying may fail the
	// agent's linearizable probe and still answer etcd with its old list.
	t.Run("a voter that does not serve but answers with the old list", func(t *testing.T) {
		r := m3StaysBehind(t)
		if _, err := startMember(t, r, 2); err == nil || r.rt.starts != 0 {
			t.Fatalf("started (%d, %v) while m3, not serving, still listed the old ID", r.rt.starts, err)
		}
	})
	t.Run("a voter that is down does not hold the start", func(t *testing.T) {
		r := newRig(t)
		r.cluster.listOf = func(ep string) ([]plan.ListedMember, error) {
			if strings.Contains(ep, "10.0.0.3") {
				return nil, errors.New("connection refused")
			}
			return fresh, nil
		}
		if _, err := startMember(t, r, 2); err != nil || r.rt.starts != 1 {
			t.Fatalf("started %d times (%v), want once: m3 is down and cannot answer etcd either", r.rt.starts, err)
		}
	})
	t.Run("a seeded data dir is not waited for", func(t *testing.T) {
		r := newRig(t)
		wal := filepath.Join(r.h.cfg.DataDir, "member", "wal")
		if err := os.MkdirAll(wal, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		r.cluster.listOf = func(string) ([]plan.ListedMember, error) {
			t.Error("asked for a member list although the WAL pins the member ID")
			return stale, nil
		}
		if _, err := startMember(t, r); err != nil || r.rt.starts != 1 {
			t.Fatalf("started %d times (%v)", r.rt.starts, err)
		}
	})
	// Review (issue 38): with --wal-dir etcd reads its WAL there and ignores
	// a member/wal left in the data dir, so that one pins nothing: the wait
	// is not skipped for it.
	t.Run("a member/wal etcd ignores does not skip the wait", func(t *testing.T) {
		r := m3StaysBehind(t)
		r.h.cfg.WALDir = filepath.Join(t.TempDir(), "wal")
		wal := filepath.Join(r.h.cfg.DataDir, "member", "wal")
		if err := os.MkdirAll(wal, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := startMember(t, r); err == nil || r.rt.starts != 0 {
			t.Fatalf("started %d times (%v) while m3 still listed the old ID: a member/wal etcd ignores skipped the wait", r.rt.starts, err)
		}
	})
}
