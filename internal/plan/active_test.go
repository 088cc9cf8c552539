package plan

// Tables for the active path: a recovery is open (journal phase started ..
// verified). Steps are judged from the cluster's actual member list, never
// from the journal's memory alone (docs/design.md §6).

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

var activePhases = []record.Phase{record.PhaseStarted, record.PhaseStopped, record.PhaseSnapshotted,
	record.PhaseRemoved, record.PhaseLearnerAdded, record.PhasePrepared, record.PhaseMemberStarted,
	record.PhasePromoted, record.PhaseVerified}

// held is an open journal in phase p with the Lease held.
func held(p record.Phase, mods ...func(*record.Record)) opt {
	return func(s *spec) { journalAt(p, mods...)(s); leaseHeld()(s) }
}

func TestRejoinStepByStep(t *testing.T) {
	// One 3-voter rejoin, as the executor walks it; the add's answer is lost
	// (it timed out but was applied), so the learner is adopted.
	stalled := progressAt(t0.Add(-time.Minute))
	gone := local(localGone) // after the remove: 2 voters left
	for _, c := range []struct {
		step string
		n    int
		opts []opt
		want Action
		id   uint64
	}{
		{"lost: begin", 3, nil, Begin, 0},
		{"lease held: stop", 3, []opt{held(record.PhaseStarted)}, StopMember, 0},
		{"stopped: snapshot", 3, []opt{held(record.PhaseStopped)}, TakeSnapshot, 0},
		{"snapshotted: remove", 3, []opt{held(record.PhaseSnapshotted)}, RemoveMember, id(1)},
		{"removed: add", 2, []opt{gone, held(record.PhaseRemoved)}, AddLearner, 0},
		{"add applied, answer lost: adopt", 2, []opt{gone, unstartedLearner(18), held(record.PhaseRemoved)}, AdoptLearner, id(18)},
		{"learner added: prepare", 2, []opt{gone, unstartedLearner(18), held(record.PhaseLearnerAdded, newID(18))}, PrepareDataDir, id(18)},
		{"prepared: start", 2, []opt{gone, unstartedLearner(18), held(record.PhasePrepared, newID(18))}, StartMember, id(18)},
		{"started: catch up", 2, []opt{gone, ourLearner(true, 1), held(record.PhaseMemberStarted, newID(18), stalled)}, WaitCatchUp, id(18)},
		{"caught up: promote", 2, []opt{gone, ourLearner(true, leaderIndex), held(record.PhaseMemberStarted, newID(18), stalled)}, Promote, id(18)},
		{"promoted: verify", 2, []opt{gone, ourVoter(18), held(record.PhasePromoted, newID(18))}, Verify, id(18)},
		{"verified: finish", 2, []opt{gone, ourVoter(18), held(record.PhaseVerified, newID(18))}, Finish, 0},
	} {
		t.Run(c.step, func(t *testing.T) {
			d := Decide(cluster(c.n, 2, c.opts...))
			want(t, d, c.want, ReasonNone)
			if d.MemberID != c.id {
				t.Errorf("MemberID = %x, want %x", d.MemberID, c.id)
			}
		})
	}
}

func TestResumeNeedsLease(t *testing.T) {
	for _, p := range activePhases {
		t.Run(string(p), func(t *testing.T) {
			d := Decide(cluster(3, 2, journalAt(p)))
			want(t, d, Begin, ReasonNone)
			if !strings.Contains(d.Detail, string(p)) {
				t.Errorf("detail %q does not name the phase", d.Detail)
			}
			want(t, Decide(cluster(3, 2, journalAt(p), noAPI())), Nothing, ReasonAPIUnavailable)
			want(t, Decide(cluster(3, 2, journalAt(p), leaseOther("node2/node2"))), Nothing, ReasonLeaseHeldByOther)
		})
	}
}

// Rule 6's re-check: with the Lease held, before the stop, Decide sees a
// fresh observation and the tracker's own verdict on it (the executor never
// overrides it). Verdicts here are ones the tracker gives for the
// observation the fixture builds.
func TestPreStopReverification(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		started := held(record.PhaseStarted)
		for _, c := range []struct {
			name   string
			k      int
			opts   []opt
			action Action
			reason Reason
		}{
			{"still lost", n - 1, nil, StopMember, ReasonNone},
			{"stopped past the grace, data dir ok", n - 1, []opt{local(localDown), verdict(memberstate.Lost)}, StopMember, ReasonNone},
			{"healthy again", n, []opt{local(localHealthy)}, Finish, ReasonNotNeeded},
			{"serving with usable data, alarm past the grace", n, []opt{local(localHealthy), verdict(memberstate.Lost)}, Finish, ReasonNotNeeded},
			{"serving with usable data, alarm", n, []opt{local(localHealthy), verdict(memberstate.Degraded)}, Finish, ReasonNotNeeded},
			{"data dir back, not serving yet, in grace", n - 1, []opt{local(localDown)}, Finish, ReasonNotNeeded},
			{"data dir back in use, not serving yet, in grace", n - 1, []opt{local(localDown), dataDir("in-use")}, Finish, ReasonNotNeeded},
			{"unconfirmed corrupt, in grace", n - 1, []opt{dataDir("corrupt"), verdict(memberstate.Down)}, Finish, ReasonInGracePeriod},
			{"wiped but serving, run restarted", n - 1, []opt{local(localWiped), verdict(memberstate.Degraded)}, Finish, ReasonInGracePeriod},
			{"manual, healthy, spare quorum", n, []opt{local(localHealthy), request()}, StopMember, ReasonNone},
			{"manual, healthy, no spare", q(n), []opt{local(localHealthy), request()}, Finish, ReasonWouldLoseQuorum},
			{"manual, restarting in grace", n - 1, []opt{local(localDown), request()}, StopMember, ReasonNone},
			{"wiped but serving, lost, no spare", q(n) - 1, []opt{local(localWiped), verdict(memberstate.Lost)}, Finish, ReasonWouldLoseQuorum},
			{"wiped but serving, lost, spare", q(n), []opt{local(localWiped), verdict(memberstate.Lost)}, StopMember, ReasonNone},
			{"a file in place of the data dir, serving, lost, spare", q(n), []opt{local(localWiped), dataDir("not-a-directory"), verdict(memberstate.Lost)}, StopMember, ReasonNone},
			{"majority lost", q(n) - 1, nil, Finish, ReasonMajorityLost},
			{"no leader", n - 1, []opt{noLeader()}, Finish, ReasonMajorityLost},
			{"another learner", n - 1, []opt{otherLearner()}, Finish, ReasonLearnerPresent},
			{"ambiguous", n - 1, []opt{forceMatch(observation.MatchAmbiguous)}, Finish, ReasonAmbiguousIdentity},
			{"disk full", n - 1, []opt{free(1)}, Finish, ReasonDiskFull},
		} {
			d := Decide(cluster(n, c.k, append([]opt{started}, c.opts...)...))
			t.Run(c.name, func(t *testing.T) { want(t, d, c.action, c.reason) })
		}
	})
}

// A stop that was attempted and failed half-way (stopped, not quarantined)
// left the member down by our hand: the re-check no longer applies, the stop
// is finished, whatever the tracker says of the member we stopped.
func TestNoRecheckOnceTheStopWasAttempted(t *testing.T) {
	attempted := held(record.PhaseStarted, func(r *record.Record) { r.StopAttemptedAt = t0.Add(-time.Second) })
	want(t, Decide(cluster(3, 2, attempted, local(localDown))), StopMember, ReasonNone)
	want(t, Decide(cluster(3, 2, attempted, dataDir("corrupt"), verdict(memberstate.Down))), StopMember, ReasonNone)
	// checkBegin still applies: a healthy member is never stopped automatically.
	want(t, Decide(cluster(3, 3, attempted, local(localHealthy))), Finish, ReasonMemberHealthy)
}

// After the stop the verdict no longer matters: the member is down because
// the recovery stopped it, and the tracker may say anything about that.
func TestVerdictIgnoredOnceStopped(t *testing.T) {
	for _, st := range []memberstate.State{memberstate.Healthy, memberstate.Degraded, memberstate.Down, memberstate.Lost} {
		want(t, Decide(cluster(3, 2, held(record.PhaseStopped), verdict(st))), TakeSnapshot, ReasonNone)
	}
}

func TestTakeSnapshot(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		want(t, Decide(cluster(n, q(n), held(record.PhaseStopped))), TakeSnapshot, ReasonNone)
	})
	// The only serving voter is the old member itself (and a learner is no source).
	want(t, Decide(cluster(1, 1, local(localHealthy), held(record.PhaseStopped))), Nothing, ReasonNoSnapshotSource)
	want(t, Decide(cluster(1, 0, local(localWiped), held(record.PhaseStopped), otherLearner())), Nothing, ReasonNoSnapshotSource)
}

func TestRemoveMemberOnlyIfOldIDStillListed(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		d := Decide(cluster(n, q(n), held(record.PhaseSnapshotted)))
		want(t, d, RemoveMember, ReasonNone)
		if d.MemberID != id(1) {
			t.Errorf("remove %x, want the old ID %x", d.MemberID, id(1))
		}
		// Already gone (removed before a crash, or never listed): next step.
		want(t, Decide(cluster(n-1, q(n-1), local(localGone), held(record.PhaseSnapshotted))), AddLearner, ReasonNone)
		want(t, Decide(cluster(n-1, q(n-1), local(localGone), held(record.PhaseRemoved))), AddLearner, ReasonNone)
		want(t, Decide(cluster(n, q(n), local(localGone), held(record.PhaseSnapshotted, oldID(0)))), AddLearner, ReasonNone)
	})
}

func TestNeverRemovesServingOldMember(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		// Restarted behind the agent's back, healthy or serving from open files.
		want(t, Decide(cluster(n, n, local(localHealthy), held(record.PhaseSnapshotted))), Nothing, ReasonMemberHealthy)
		want(t, Decide(cluster(n, n-1, local(localWiped), held(record.PhaseSnapshotted))), Nothing, ReasonMemberHealthy)
		want(t, Decide(cluster(n, n, local(localHealthy), held(record.PhaseSnapshotted), request())), Nothing, ReasonMemberHealthy)
	})
}

func TestRemoveWaitsWhenItWouldLoseQuorum(t *testing.T) {
	// Quorum holds (serving = Q(n)) but one serving voter has a wiped data dir,
	// so healthy = Q(n)-1: removing the (down) old member n is safe only
	// when Q(n-1) = Q(n)-1, i.e. n is even.
	forN(t, 3, 7, func(t *testing.T, n int) {
		d := Decide(cluster(n, q(n)-1, local(localWiped), held(record.PhaseSnapshotted, oldID(id(n)))))
		if n%2 == 1 {
			want(t, d, Nothing, ReasonWouldLoseQuorum)
		} else {
			want(t, d, RemoveMember, ReasonNone)
		}
	})
}

func TestAddLearnerOrAdopt(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		removed := func(mods ...func(*record.Record)) opt { return held(record.PhaseRemoved, mods...) }
		for _, c := range []struct {
			name   string
			opts   []opt
			action Action
			reason Reason
			id     uint64
		}{
			{"nobody has our peer URL: add", nil, AddLearner, ReasonNone, 0},
			{"unstarted learner with our peer URL: adopt", []opt{unstartedLearner(18)}, AdoptLearner, ReasonNone, id(18)},
			{"learner under our name: adopt", []opt{ourLearner(false, 0)}, AdoptLearner, ReasonNone, id(18)},
			{"another learner: wait", []opt{otherLearner()}, Nothing, ReasonLearnerPresent, 0},
			{"learner with our peer URL, another name", []opt{learnerOf(17, "node17", localPeer)}, Finish, ReasonAmbiguousIdentity, 0},
			{"learner with our peer URL, not the one we added", []opt{unstartedLearner(17), removed(newID(18))}, Finish, ReasonAmbiguousIdentity, 0},
			{"voter with our peer URL", []opt{ourVoter(17)}, Finish, ReasonAmbiguousIdentity, 0},
		} {
			d := Decide(cluster(n, n, append([]opt{local(localGone), removed()}, c.opts...)...))
			t.Run(c.name, func(t *testing.T) {
				want(t, d, c.action, c.reason)
				if d.MemberID != c.id {
					t.Errorf("MemberID = %x, want %x", d.MemberID, c.id)
				}
			})
		}
	})
	// Healthy voters below quorum while serving ones are not (a serving voter
	// with a wiped data dir): no add.
	elsewhere := func(r *record.Record) { r.PeerURLs = []string{peer(30)} }
	want(t, Decide(cluster(3, 1, local(localWiped), held(record.PhaseRemoved, oldID(0), elsewhere))), Nothing, ReasonWouldLoseQuorum)
}

func TestPromoteByAbsoluteLag(t *testing.T) {
	for _, maxLag := range []uint64{0, 1, 1000} {
		t.Run(fmt.Sprintf("max=%d", maxLag), func(t *testing.T) {
			lag := cfg(func(c *Config) { c.MaxLearnerLag = maxLag })
			started := held(record.PhaseMemberStarted, newID(18), progressAt(t0))
			for _, c := range []struct {
				applied uint64
				serving bool
				action  Action
			}{
				{leaderIndex - maxLag, true, Promote},
				{leaderIndex - maxLag - 1, true, WaitCatchUp},
				{leaderIndex + 5, true, Promote}, // ahead of the leader's last report
				{leaderIndex, false, WaitCatchUp},
			} {
				d := Decide(cluster(3, 2, local(localGone), lag, started, ourLearner(c.serving, c.applied)))
				want(t, d, c.action, ReasonNone)
				if d.MemberID != id(18) {
					t.Errorf("MemberID = %x, want the learner %x", d.MemberID, id(18))
				}
			}
			// Promoted in the journal but still a learner (ErrLearnerNotReady): retry.
			d := Decide(cluster(3, 2, local(localGone), lag, held(record.PhasePromoted, newID(18)), ourLearner(true, leaderIndex)))
			want(t, d, Promote, ReasonNone)
		})
	}
}

func TestLearnerLag(t *testing.T) {
	in, _ := cluster(3, 2, local(localGone), ourLearner(true, leaderIndex-7), unstartedLearner(17))
	if lag, ok := LearnerLag(in.Obs, id(18)); !ok || lag != 7 {
		t.Errorf("LearnerLag = %d, %v; want 7, true", lag, ok)
	}
	for _, l := range []uint64{id(17), id(99)} {
		if _, ok := LearnerLag(in.Obs, l); ok {
			t.Errorf("LearnerLag(%x) is known for a member not serving or not listed", l)
		}
	}
}

func TestRemoveStalledLearner(t *testing.T) {
	stall := 5 * time.Minute
	behind := ourLearner(true, leaderIndex-5000)
	for _, c := range []struct {
		name     string
		progress time.Time
		learner  opt
		action   Action
		reason   Reason
	}{
		{"no progress for longer than the timeout", t0.Add(-stall - time.Nanosecond), behind, RemoveStalledLearner, ReasonLearnerStalled},
		{"not even serving", t0.Add(-stall - time.Nanosecond), ourLearner(false, 0), RemoveStalledLearner, ReasonLearnerStalled},
		{"exactly the timeout", t0.Add(-stall), behind, WaitCatchUp, ReasonNone},
		{"no progress recorded yet", time.Time{}, behind, WaitCatchUp, ReasonNone},
		{"caught up just in time", t0.Add(-time.Hour), ourLearner(true, leaderIndex), Promote, ReasonNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(cluster(3, 2, local(localGone), c.learner, held(record.PhaseMemberStarted, newID(18), progressAt(c.progress))))
			want(t, d, c.action, c.reason)
			if d.MemberID != id(18) {
				t.Errorf("MemberID = %x, want the learner %x", d.MemberID, id(18))
			}
		})
	}
}

func TestLearnerGoneFinishes(t *testing.T) {
	for _, p := range activePhases {
		if !p.AtLeast(record.PhaseLearnerAdded) {
			continue
		}
		t.Run(string(p), func(t *testing.T) {
			want(t, Decide(cluster(3, 3, local(localGone), held(p, newID(18)))), Finish, ReasonLearnerGone)
		})
	}
}

func TestVoterWithOurPeerURLNotOursFinishesAmbiguous(t *testing.T) {
	for _, p := range activePhases {
		if !p.AtLeast(record.PhaseSnapshotted) {
			continue
		}
		t.Run(string(p), func(t *testing.T) {
			want(t, Decide(cluster(3, 3, local(localGone), ourVoter(17), held(p, newID(18)))), Finish, ReasonAmbiguousIdentity)
			want(t, Decide(cluster(3, 3, local(localGone), ourVoter(17), held(p))), Finish, ReasonAmbiguousIdentity)
		})
	}
}

func TestVerifyThenFinish(t *testing.T) {
	for _, p := range []record.Phase{record.PhaseMemberStarted, record.PhasePromoted} {
		d := Decide(cluster(3, 2, local(localGone), ourVoter(18), held(p, newID(18))))
		want(t, d, Verify, ReasonNone)
		if d.MemberID != id(18) {
			t.Errorf("verify %x, want %x", d.MemberID, id(18))
		}
	}
	want(t, Decide(cluster(3, 2, local(localGone), ourVoter(18), held(record.PhaseVerified, newID(18)))), Finish, ReasonNone)
}

func TestMajorityLostMidRecoveryWaits(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		for _, p := range activePhases {
			if !p.AtLeast(record.PhaseStopped) {
				continue
			}
			for name, o := range map[string]opt{"serving below quorum": nil, "no leader": noLeader(), "no member list": listError()} {
				// Our new member serves: as a learner, or once promoted as a
				// voter (then one of n+1 voters).
				opts := []opt{local(localGone), held(p, newID(18)), ourLearner(true, leaderIndex)}
				k := q(n) - 1
				if p.AtLeast(record.PhasePromoted) {
					opts[2], k = ourVoter(18), q(n+1)-2
				}
				if o != nil {
					opts, k = append(opts, o), n
				}
				t.Run(string(p)+"/"+name, func(t *testing.T) {
					want(t, Decide(cluster(n, k, opts...)), Nothing, ReasonMajorityLost)
				})
			}
		}
	})
}

func TestForeignClusterMidRecoveryWaits(t *testing.T) {
	for _, p := range activePhases {
		if !p.AtLeast(record.PhaseStopped) {
			continue
		}
		t.Run(string(p), func(t *testing.T) {
			want(t, Decide(cluster(3, 2, local(localGone), held(p, newID(18)), onlyForeignAnswers())), Nothing, ReasonForeignCluster)
		})
	}
	// Before the stop, the re-verification refuses and closes the attempt.
	want(t, Decide(cluster(3, 2, held(record.PhaseStarted), onlyForeignAnswers())), Finish, ReasonForeignCluster)
}

// A dry run with an open journal (an agent restarted with --dry-run
// mid-heal, or a dry-run request) changes nothing in any phase, takes no
// Lease, and says which phase is open and which step it would take.
func TestDryRunWithOpenJournal(t *testing.T) {
	dry := cfg(func(c *Config) { c.DryRun = true })
	gone := local(localGone)
	for _, c := range []struct {
		phase record.Phase
		n     int
		opts  []opt
		step  Action
	}{
		{record.PhaseStarted, 3, []opt{held(record.PhaseStarted)}, StopMember},
		{record.PhaseStopped, 3, []opt{held(record.PhaseStopped)}, TakeSnapshot},
		{record.PhaseSnapshotted, 3, []opt{held(record.PhaseSnapshotted)}, RemoveMember},
		{record.PhaseRemoved, 2, []opt{gone, held(record.PhaseRemoved)}, AddLearner},
		{record.PhaseLearnerAdded, 2, []opt{gone, unstartedLearner(18), held(record.PhaseLearnerAdded, newID(18))}, PrepareDataDir},
		{record.PhaseMemberStarted, 2, []opt{gone, ourLearner(true, leaderIndex), held(record.PhaseMemberStarted, newID(18))}, Promote},
		{record.PhasePromoted, 2, []opt{gone, ourVoter(18), held(record.PhasePromoted, newID(18))}, Verify},
		{record.PhaseVerified, 2, []opt{gone, ourVoter(18), held(record.PhaseVerified, newID(18))}, Finish},
		// Not holding the Lease: resuming would take it.
		{record.PhaseRemoved, 2, []opt{gone, journalAt(record.PhaseRemoved)}, Begin},
	} {
		for _, mode := range []opt{dry, dryRunRequest()} {
			t.Run(string(c.phase)+"/"+string(c.step), func(t *testing.T) {
				d := Decide(cluster(c.n, 2, append(c.opts, mode)...))
				want(t, d, Refuse, ReasonDryRun)
				if !strings.Contains(d.Detail, string(c.phase)) || !strings.Contains(d.Detail, string(c.step)) {
					t.Errorf("detail %q does not name the phase %q and the next step %q", d.Detail, c.phase, c.step)
				}
			})
		}
	}
}
