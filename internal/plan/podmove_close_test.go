package plan

import (
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// From issue 38: a pod move whose claim and pod were released closed
// succeeded at once, before its member served anywhere. It now closes
// succeeded only once the member (its name, a new ID) is a voter that
// answers, waits for that without the Lease (the target's agent needs it
// to add the learner), and fails at its deadline.
func TestAReleasedPodMoveSucceedsOnlyWhenItsMemberServesOnTheTarget(t *testing.T) {
	released := podMove(func(c *ClaimFacts) {
		c.ReservedPV, c.ClaimBound, c.PodOnNode, c.OldPVRetained = "pv-9", false, false, true
	})
	journal := awayJournal(record.PhaseRemoved, oldID(id(1)), func(r *record.Record) { r.ClaimReleasedAt = t0 })
	at := func(d time.Duration) opt { return func(s *spec) { s.in.Now = t0.Add(d) } }
	deadline := func(s *spec) { s.cfg.MoveDeadline = 10 * time.Minute }
	moved := func(serving, learner bool) opt {
		return member(observation.Member{ID: id(9), Name: localName, PeerURLs: []string{peer(9)}, Serving: serving, IsLearner: learner,
			RaftIndex: leaderIndex, AppliedIndex: leaderIndex})
	}
	otherHolds := func(s *spec) { s.in.LeaseHolder = "node9/node1" }
	for _, c := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
	}{
		{"released, the member not yet on the target", []opt{leaseHeld(), at(time.Minute)}, Nothing, ReasonAwaitingMoveTarget},
		{"released, the target's agent holds the Lease (adding the learner)", []opt{otherHolds, at(time.Minute)}, Nothing, ReasonAwaitingMoveTarget},
		{"released, the Lease free: waited for without it", []opt{at(time.Minute)}, Nothing, ReasonAwaitingMoveTarget},
		{"the member a learner on the target", []opt{leaseHeld(), at(time.Minute), moved(true, true)}, Nothing, ReasonAwaitingMoveTarget},
		{"the member a voter that does not answer", []opt{leaseHeld(), at(time.Minute), moved(false, false)}, Nothing, ReasonAwaitingMoveTarget},
		{"the member a voter that answers: succeeded", []opt{at(time.Minute), moved(true, false)}, Finish, ReasonNone},
		{"the deadline passed, no member: failed", []opt{leaseHeld(), at(10*time.Minute + time.Second)}, Finish, ReasonMoveTimedOut},
		{"the deadline passed, a learner only: failed", []opt{at(11 * time.Minute), moved(true, true)}, Finish, ReasonMoveTimedOut},
	} {
		opts := append([]opt{local(localGone), journal, released, deadline}, c.opts...)
		d := Decide(cluster(2, 2, opts...))
		if d.Action != c.action || d.Reason != c.reason {
			t.Errorf("%s: %s/%s (%s), want %s/%s", c.name, d.Action, d.Reason, d.Detail, c.action, c.reason)
		}
	}
}
