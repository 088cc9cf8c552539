package plan

// Tables for the stranded learner (issue 10 item 5): a learner whose owner
// died blocks every other heal with learner-present, for good, unless the
// next Lease holder rolls it back.

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// clockOf: the watchdog has seen learner i make no progress since since.
func clockOf(i int, since time.Time) opt {
	return func(s *spec) {
		s.in.Learners = append(s.in.Learners, memberstate.LearnerProgress{ID: id(i), Since: since})
	}
}

// leaseFreeFor: this agent has seen the Lease free at every look for d.
func leaseFreeFor(d time.Duration) opt {
	return func(s *spec) { s.in.LeaseFreeSince = t0.Add(-d) }
}

// strandedOwnerLearner is what a dead owner leaves: an unstarted learner
// (no name, not serving) with the owner's peer URL.
func strandedOwnerLearner() opt { return member(learner(19, "", peer(19), false, 0)) }

// rollbackAt opens a rollback record of learner 19 in phase p.
func rollbackAt(p record.Phase) opt {
	return journalAt(p, func(r *record.Record) {
		r.Kind, r.LearnerID, r.OldMemberID = record.KindRollbackLearner, record.MemberID(id(19)), 0
	})
}

func TestStrandedLearnerIsRolledBackByTheNextHolder(t *testing.T) {
	stalled, recent := clockOf(19, t0.Add(-6*time.Minute)), clockOf(19, t0.Add(-4*time.Minute)) // stall timeout 5m
	free := leaseFreeFor(6 * time.Minute)
	behind := member(learner(19, "node19", peer(19), true, leaderIndex-5000)) // serving, far behind
	caughtUp := member(learner(19, "node19", peer(19), true, leaderIndex-10))
	noStall := cfg(func(c *Config) { c.LearnerStallTimeout = 0 })
	dry := cfg(func(c *Config) { c.DryRun = true })
	for _, tc := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
	}{
		{"owner's learner unstarted, no progress past the stall timeout, Lease free", []opt{strandedOwnerLearner(), stalled, free}, RollbackLearner, ReasonLearnerStranded},
		{"the same, asked by a manual request", []opt{strandedOwnerLearner(), stalled, free, request()}, RollbackLearner, ReasonLearnerStranded},
		{"serving but stuck far behind", []opt{behind, stalled, free}, RollbackLearner, ReasonLearnerStranded},
		{"Lease free only for a moment (a live owner's lapse, e.g. mid seed stream)", []opt{strandedOwnerLearner(), stalled, leaseFreeFor(time.Minute)}, Refuse, ReasonLearnerPresent},
		{"Lease not yet seen free", []opt{strandedOwnerLearner(), stalled}, Refuse, ReasonLearnerPresent},
		{"within the stall timeout", []opt{strandedOwnerLearner(), recent}, Refuse, ReasonLearnerPresent},
		{"no clock yet (a restarted agent)", []opt{strandedOwnerLearner()}, Refuse, ReasonLearnerPresent},
		{"slow catch-up that progresses (a live owner, API partitioned)", []opt{behind, recent}, Refuse, ReasonLearnerPresent},
		{"caught up: promotable, not stranded", []opt{caughtUp, stalled}, Refuse, ReasonLearnerPresent},
		{"another agent holds a live Lease: its owner may be mid-heal", []opt{strandedOwnerLearner(), stalled, leaseOther("node19/node19")}, Refuse, ReasonLearnerPresent},
		{"stall timeout off", []opt{strandedOwnerLearner(), stalled, noStall}, Refuse, ReasonLearnerPresent},
		{"no API, no Lease, no rollback", []opt{strandedOwnerLearner(), stalled, free, noAPI()}, Refuse, ReasonAPIUnavailable},
		{"dry run", []opt{strandedOwnerLearner(), stalled, free, dry}, Refuse, ReasonDryRun},
		{"dry-run request", []opt{strandedOwnerLearner(), stalled, free, dryRunRequest()}, Refuse, ReasonDryRun},
		{"a learner with our peer URL is ours or of unknown origin (rule 7)", []opt{unstartedLearner(19), stalled}, Refuse, ReasonAmbiguousIdentity},
		{"a healthy local member never rolls back", []opt{local(localHealthy), strandedOwnerLearner(), stalled}, Nothing, ReasonNone},
		{"a healthy local member asked for a rejoin without a spare", []opt{local(localHealthy), request(), strandedOwnerLearner(), stalled}, Refuse, ReasonWouldLoseQuorum},
		{"majority lost", []opt{strandedOwnerLearner(), stalled, noLeader()}, Refuse, ReasonMajorityLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 4 voters (the owner's old member was removed before its add),
			// the local one lost, 3 healthy peers.
			d := Decide(cluster(4, 3, tc.opts...))
			want(t, d, tc.action, tc.reason)
			if d.Action == RollbackLearner && d.MemberID != id(19) {
				t.Fatalf("rolls back %x, want the stranded learner %x", d.MemberID, id(19))
			}
		})
	}
}

func TestRollbackRecordRechecksBeforeTheRemove(t *testing.T) {
	stalled := clockOf(19, t0.Add(-6*time.Minute))
	promoted := member(observationVoter(19))
	for _, tc := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
	}{
		{"Lease held, still stranded on a fresh look", []opt{rollbackAt(record.PhaseStarted), leaseHeld(), strandedOwnerLearner(), stalled}, RemoveStrandedLearner, ReasonLearnerStranded},
		{"resumed: take the Lease again", []opt{rollbackAt(record.PhaseStarted), strandedOwnerLearner(), stalled}, Begin, ReasonNone},
		{"resumed while another holds the Lease", []opt{rollbackAt(record.PhaseStarted), strandedOwnerLearner(), stalled, leaseOther("node3/node3")}, Nothing, ReasonLeaseHeldByOther},
		{"the learner is gone", []opt{rollbackAt(record.PhaseRemoved), leaseHeld()}, Finish, ReasonLearnerRolledBack},
		{"gone before we removed it", []opt{rollbackAt(record.PhaseStarted), leaseHeld()}, Finish, ReasonLearnerRolledBack},
		{"a restarted agent's clock starts afresh: nothing changed", []opt{rollbackAt(record.PhaseStarted), leaseHeld(), strandedOwnerLearner()}, Finish, ReasonNotNeeded},
		{"it progresses now", []opt{rollbackAt(record.PhaseStarted), leaseHeld(), strandedOwnerLearner(), clockOf(19, t0)}, Finish, ReasonNotNeeded},
		{"a journaled remove is redone (idempotent)", []opt{rollbackAt(record.PhaseRemoved), leaseHeld(), strandedOwnerLearner()}, RemoveStrandedLearner, ReasonLearnerStranded},
		{"promoted meanwhile", []opt{rollbackAt(record.PhaseStarted), leaseHeld(), promoted, stalled}, Finish, ReasonAmbiguousIdentity},
		{"quorum lost before the remove", []opt{rollbackAt(record.PhaseStarted), leaseHeld(), strandedOwnerLearner(), stalled, noLeader()}, Finish, ReasonMajorityLost},
		{"quorum lost after the remove", []opt{rollbackAt(record.PhaseRemoved), leaseHeld(), strandedOwnerLearner(), stalled, noLeader()}, Nothing, ReasonMajorityLost},
		{"dry run", []opt{rollbackAt(record.PhaseStarted), leaseHeld(), strandedOwnerLearner(), stalled, cfg(func(c *Config) { c.DryRun = true })}, Refuse, ReasonDryRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(cluster(4, 3, tc.opts...))
			want(t, d, tc.action, tc.reason)
			if d.Action == RemoveStrandedLearner && d.MemberID != id(19) {
				t.Fatalf("removes %x, want the stranded learner %x", d.MemberID, id(19))
			}
			if tc.reason == ReasonDryRun && !strings.Contains(d.Detail, string(RemoveStrandedLearner)) {
				t.Fatalf("dry run %q does not say it would remove the learner", d.Detail)
			}
		})
	}
}

func observationVoter(i int) observation.Member {
	return observation.Member{ID: id(i), Name: "node19", PeerURLs: []string{peer(i)}, Serving: true,
		RaftIndex: leaderIndex, AppliedIndex: leaderIndex}
}

// Our own rejoin holds the Lease past the remove (resumed after another
// agent had taken it over, added its learner and died): the stranded
// learner is removed at the add instead of waiting learner-present until
// the recovery timeout.
func TestStrandedLearnerRemovedAtOurAdd(t *testing.T) {
	stalled := clockOf(19, t0.Add(-6*time.Minute))
	removed := journalAt(record.PhaseRemoved)
	d := Decide(cluster(4, 3, local(localGone), removed, leaseHeld(), strandedOwnerLearner(), stalled))
	want(t, d, RemoveStrandedLearner, ReasonLearnerStranded)
	if d.MemberID != id(19) {
		t.Fatalf("removes %x, want %x", d.MemberID, id(19))
	}
	want(t, Decide(cluster(4, 3, local(localGone), removed, leaseHeld(), strandedOwnerLearner(), clockOf(19, t0.Add(-time.Minute)))),
		Nothing, ReasonLearnerPresent)
	want(t, Decide(cluster(4, 3, local(localGone), removed, leaseHeld(), strandedOwnerLearner())), Nothing, ReasonLearnerPresent)
}
