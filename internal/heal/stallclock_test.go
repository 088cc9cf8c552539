package heal

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// TestLearnerStallClockStartsWhenTheMemberHasStarted: the learner-stall
// timeout measures a learner that runs and makes no progress. A member
// start that takes long (a slow runtime, a pod waiting to be scheduled; in
// CI, a held start under load) must not count: before the fix the clock
// started before the start, and the learner was removed as "stalled" 100 ms
// after it came up (TestSeedModeLearnerStartedAfterTheLeaderCompactedGetsASnapshotOnEtcd37).
func TestLearnerStallClockStartsWhenTheMemberHasStarted(t *testing.T) {
	for _, d := range []plan.Decision{{Action: plan.StartMember}, {Action: plan.AddLearner}} {
		t.Run(string(d.Action), func(t *testing.T) {
			r := newRig(t)
			clock := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
			r.h.now = func() time.Time { return clock }
			started := clock.Add(2 * planConfig().LearnerStallTimeout)
			r.rt.onStart = func() { clock = started }
			r.lease.held, r.lease.renewing = true, true
			r.h.lease = r.lease // as after an acquire: every step is fenced on it
			j := journal.Record{ID: "j1", Member: "m1", Node: "node1", Request: "auto", StartedAt: clock, OldMemberID: 0xa1, PeerURLs: []string{peerURL(1)}}
			j.Advance(journal.PhaseRemoved, clock)
			if d.Action == plan.StartMember {
				j.NewMemberID = 0xa9
				j.Advance(journal.PhaseLearnerAdded, clock)
				j.Advance(journal.PhasePrepared, clock)
			}
			if err := r.h.step(context.Background(), cluster3(memberstate.Lost, 2, 3), nil, &j, d, nil); err != nil {
				t.Fatal(err)
			}
			if r.rt.starts != 1 {
				t.Fatalf("member started %d times", r.rt.starts)
			}
			if j.LearnerProgressAt.Before(started) {
				t.Fatalf("stall clock started at %s, before the member did (%s)", j.LearnerProgressAt, started)
			}
			if saved := r.journal(t); saved.LearnerProgressAt.Before(started) {
				t.Fatalf("journal on disk: stall clock at %s, before the member started (%s)", saved.LearnerProgressAt, started)
			}
		})
	}
}
