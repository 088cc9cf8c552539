package plan

// Tables for a move (UC3, static pods): the source's side (DecideMove), the
// target's move-in and the source's move-out, one case per refusal.

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// moveIn is the source's input: a healthy local member (node1) in n healthy
// voters, a Ready target node9, the store answering.
func moveIn(n int, opts ...func(*MoveInput)) MoveInput {
	in, _ := cluster(n, n, local(localHealthy))
	mi := MoveInput{Now: t0, Obs: in.Obs, Node: "node1", Target: TargetNode{Name: "node9", Found: true, Ready: true},
		StoreConfigured: true, Timeout: 30 * time.Minute}
	for _, o := range opts {
		o(&mi)
	}
	return mi
}

// targetMember adds node9's member (ID 29) to the observation.
func targetMember(learner, serving bool) func(*MoveInput) {
	return func(mi *MoveInput) {
		mi.Obs.Members = append(mi.Obs.Members, observation.Member{ID: id(29), Name: "node9", PeerURLs: []string{peer(29)},
			IsLearner: learner, Serving: serving, RaftIndex: leaderIndex, AppliedIndex: leaderIndex})
	}
}

// asked: this agent asked a minute ago, with the members of the input so
// far (mods after it change the list since the ask).
func asked(mi *MoveInput) { mi.AskedAt, mi.MembersAtAsk = t0.Add(-time.Minute), MembersOf(mi.Obs) }

func TestDecideMoveRefusesEachUnsafeOrUnclearStart(t *testing.T) {
	cases := []struct {
		name string
		mods []func(*MoveInput)
		want Reason
	}{
		{"no target", []func(*MoveInput){func(mi *MoveInput) { mi.Target.Name = "" }}, ReasonBadRequest},
		{"target is this node", []func(*MoveInput){func(mi *MoveInput) { mi.Target.Name = "node1" }}, ReasonBadRequest},
		{"no such node", []func(*MoveInput){func(mi *MoveInput) { mi.Target.Found = false }}, ReasonBadRequest},
		{"target not Ready", []func(*MoveInput){func(mi *MoveInput) { mi.Target.Ready = false }}, ReasonTargetNotReady},
		{"target already has a voter", []func(*MoveInput){targetMember(false, true)}, ReasonTargetHasMember},
		{"target already has a learner", []func(*MoveInput){targetMember(true, false)}, ReasonTargetHasMember},
		{"a voter unhealthy", []func(*MoveInput){func(mi *MoveInput) { mi.Obs.Members[2].Serving = false }}, ReasonWouldLoseQuorum},
		{"another learner", []func(*MoveInput){func(mi *MoveInput) {
			mi.Obs.Members = append(mi.Obs.Members, learner(19, "node19", peer(19), true, leaderIndex))
		}}, ReasonLearnerPresent},
		{"the local member does not serve", []func(*MoveInput){func(mi *MoveInput) { mi.Obs.Members[0].Serving = false }}, ReasonMemberNotHealthy},
		{"the local data dir is gone", []func(*MoveInput){func(mi *MoveInput) { mi.Obs.Local.DataDirClass = "missing" }}, ReasonMemberNotHealthy},
		{"no store", []func(*MoveInput){func(mi *MoveInput) { mi.StoreConfigured = false }}, ReasonNoSnapshotStore},
		{"store unreachable", []func(*MoveInput){func(mi *MoveInput) { mi.StoreError = "dial tcp: connection refused" }}, ReasonSnapshotStoreUnreached},
		{"local member not in the list", []func(*MoveInput){func(mi *MoveInput) {
			mi.Obs.Local.Match, mi.Obs.Local.ID = observation.MatchNotFound, 0
		}}, ReasonBadRequest},
		{"majority lost", []func(*MoveInput){func(mi *MoveInput) {
			mi.Obs.Members[1].Serving, mi.Obs.Members[2].Serving = false, false
		}}, ReasonMajorityLost},
		{"dry run", []func(*MoveInput){func(mi *MoveInput) { mi.DryRun = true }}, ReasonDryRun},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := DecideMove(moveIn(3, c.mods...))
			if d.Action != Refuse || d.Reason != c.want {
				t.Fatalf("DecideMove = %s/%s (%s), want refuse/%s", d.Action, d.Reason, d.Detail, c.want)
			}
		})
	}
}

// answered: node9's agent answered this ask's move-in with result (the
// member it added is 29).
func answered(result string, thisAsk bool) func(*MoveInput) {
	return func(mi *MoveInput) {
		mi.Target.Answer = &MoveAnswer{Result: result, Reason: "r", Message: "m", MemberID: id(29), ThisAsk: thisAsk}
	}
}

func TestDecideMoveAsksThenWaitsThenRetires(t *testing.T) {
	if d := DecideMove(moveIn(1)); d.Action != Refuse || d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("one-member cluster: %s/%s (%s), want a refusal", d.Action, d.Reason, d.Detail)
	}
	for _, n := range []int{2, 3, 5} {
		if d := DecideMove(moveIn(n)); d.Action != MoveRelay || d.MemberID != id(1) {
			t.Fatalf("n=%d: %s/%s (%s), want %s for %x", n, d.Action, d.Reason, d.Detail, MoveRelay, id(1))
		}
		// Asked: the target's member joins as a learner, then serves; its
		// agent has not answered yet (it verifies, holds the Lease).
		for _, mods := range [][]func(*MoveInput){{asked}, {asked, targetMember(true, false)}, {asked, targetMember(true, true)},
			{asked, targetMember(false, true)}, {asked, targetMember(false, true), answered("succeeded", true), func(mi *MoveInput) { mi.Obs.Members[n].Serving = false }}} {
			if d := DecideMove(moveIn(n, mods...)); d.Action != Nothing || d.Reason != ReasonMoveWaiting {
				t.Fatalf("n=%d: %s/%s (%s), want a wait", n, d.Action, d.Reason, d.Detail)
			}
		}
		// Answered succeeded, its member a serving voter, every voter
		// healthy: retire the local member. Also when the ask's write did
		// not answer (AskedAt not recorded, the ask and its members are).
		askUnanswered := func(mi *MoveInput) { mi.MembersAtAsk = MembersOf(mi.Obs) }
		for _, mods := range [][]func(*MoveInput){{asked, targetMember(false, true), answered("succeeded", true)},
			{askUnanswered, targetMember(false, true), answered("succeeded", true)}} {
			if d := DecideMove(moveIn(n, mods...)); d.Action != MoveRetire || d.MemberID != id(1) {
				t.Fatalf("n=%d: %s/%s (%s), want %s", n, d.Action, d.Reason, d.Detail, MoveRetire)
			}
		}
	}
	// The dry run of a retire says so and does nothing.
	d := DecideMove(moveIn(3, asked, targetMember(false, true), answered("succeeded", true), func(mi *MoveInput) { mi.DryRun = true }))
	if d.Action != Refuse || d.Reason != ReasonDryRun || !strings.Contains(d.Detail, "would stop and remove") {
		t.Fatalf("dry run of the retire: %+v", d)
	}
	// An old success whose member is gone again is not this move's: ask.
	if d := DecideMove(moveIn(3, answered("succeeded", false))); d.Action != MoveRelay {
		t.Fatalf("stale success: %s/%s (%s), want %s", d.Action, d.Reason, d.Detail, MoveRelay)
	}
}

func TestDecideMoveNeverRetiresWhileAVoterIsUnhealthy(t *testing.T) {
	d := DecideMove(moveIn(3, asked, targetMember(false, true), answered("succeeded", true), func(mi *MoveInput) { mi.Obs.Members[2].Serving = false }))
	if d.Action != Nothing || d.Reason != ReasonMoveWaiting || !strings.Contains(d.Detail, "every voter is healthy") {
		t.Fatalf("%s/%s (%s), want a wait for every voter", d.Action, d.Reason, d.Detail)
	}
	// A voter on the target that no answer ties to this move is never
	// taken for its member: two moves to one node add one member.
	if d := DecideMove(moveIn(3, asked, targetMember(false, true))); d.Action == MoveRetire {
		t.Fatalf("retired for a voter without the target's answer: %+v", d)
	}
	if d := DecideMove(moveIn(3, targetMember(false, true))); d.Action != Refuse || d.Reason != ReasonTargetHasMember {
		t.Fatalf("unasked voter on the target: %s/%s", d.Action, d.Reason)
	}
	if d := DecideMove(moveIn(3, func(mi *MoveInput) { mi.Target.OtherAsk = "node5/a005/x" })); d.Action != Refuse || d.Reason != ReasonTargetHasMember {
		t.Fatalf("target asked by another move: %s/%s", d.Action, d.Reason)
	}
	// The wait for the retire is bounded too.
	d = DecideMove(moveIn(3, asked, targetMember(false, true), answered("succeeded", true), func(mi *MoveInput) {
		mi.AskedAt = t0.Add(-31 * time.Minute)
		mi.Obs.Members[2].Serving = false
	}))
	if d.Action != Finish || d.Reason != ReasonMoveTimedOut {
		t.Fatalf("retire wait past the timeout: %+v", d)
	}
}

func TestDecideMoveFailsOnTheTargetsAnswerOrTimeout(t *testing.T) {
	d := DecideMove(moveIn(3, asked, answered("refused", true)))
	if d.Action != Finish || d.Reason != ReasonMoveFailed {
		t.Fatalf("target refused: %+v", d)
	}
	// An answer to an earlier ask does not end this one.
	if d := DecideMove(moveIn(3, asked, answered("failed", false))); d.Action != Nothing || d.Reason != ReasonMoveWaiting {
		t.Fatalf("earlier ask's failure: %+v", d)
	}
	d = DecideMove(moveIn(3, func(mi *MoveInput) { mi.AskedAt = t0.Add(-31 * time.Minute) }))
	if d.Action != Finish || d.Reason != ReasonMoveTimedOut {
		t.Fatalf("target silent past the timeout: %+v", d)
	}
	// A target Node that cannot be read is asked again, not refused.
	if d := DecideMove(moveIn(3, func(mi *MoveInput) { mi.Target = TargetNode{Name: "node9", Unreadable: true} })); d.Action != Nothing {
		t.Fatalf("unreadable target: %+v", d)
	}
}

// moveInRequest is the target's request: replace member 2.
func moveInRequest(s *spec) { s.in.Request = &Request{Action: ActionMoveIn, Replaces: id(2)} }

func withStore(c *Config) { c.SnapshotStore = true }

func TestMoveInBeginsOnlyForANewMemberWithEveryVoterHealthy(t *testing.T) {
	if d := Decide(cluster(1, 1, local(localGone), moveInRequest, cfg(withStore))); d.Action != Refuse || d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("one-member cluster: %s/%s (%s), want a refusal", d.Action, d.Reason, d.Detail)
	}
	for _, n := range []int{2, 3, 5} {
		if d := Decide(cluster(n, n, local(localGone), moveInRequest, cfg(withStore))); d.Action != Begin {
			t.Fatalf("n=%d: %s/%s (%s), want begin", n, d.Action, d.Reason, d.Detail)
		}
	}
	cases := []struct {
		name string
		opts []opt
		want Reason
	}{
		{"no store", []opt{local(localGone), moveInRequest}, ReasonNoSnapshotStore},
		{"already a member", []opt{local(localHealthy), moveInRequest, cfg(withStore)}, ReasonTargetHasMember},
		{"a member has our peer URL", []opt{local(localGone), unstartedLearner(18), moveInRequest, cfg(withStore)}, ReasonTargetHasMember},
		{"data dir holds etcd data", []opt{local(localGone), dataDir("ok"), moveInRequest, cfg(withStore)}, ReasonTargetHasMember},
		{"replaced member unknown", []opt{local(localGone), cfg(withStore), func(s *spec) {
			s.in.Request = &Request{Action: ActionMoveIn, Replaces: id(77)}
		}}, ReasonBadRequest},
		{"replaced member down", []opt{local(localGone), cfg(withStore), func(s *spec) {
			s.healthy, s.in.Request = 2, &Request{Action: ActionMoveIn, Replaces: id(4)} // peers 2, 3 serve; 4 does not
		}}, ReasonMemberNotHealthy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(cluster(3, 3, c.opts...))
			if d.Action != Refuse || d.Reason != c.want {
				t.Fatalf("Decide = %s/%s (%s), want refuse/%s", d.Action, d.Reason, d.Detail, c.want)
			}
		})
	}
	// Issue 38: a file in place of the data dir holds no etcd data; the stop
	// quarantines it as it is.
	if d := Decide(cluster(3, 3, local(localGone), dataDir("not-a-directory"), moveInRequest, cfg(withStore))); d.Action != Begin {
		t.Fatalf("a file in place of the data dir: %s/%s (%s), want begin", d.Action, d.Reason, d.Detail)
	}
	// Another voter down (not the replaced one): every voter must be healthy.
	in, c := cluster(3, 3, local(localGone), moveInRequest, cfg(withStore))
	in.Obs.Members[2].Serving = false
	if d := Decide(in, c); d.Action != Refuse || d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("a voter down: %s/%s", d.Action, d.Reason)
	}
}

func TestANeverSeenMemberIsNotAddedUnasked(t *testing.T) {
	never := func(s *spec) { s.in.NeverAMember = true }
	if d := Decide(cluster(3, 3, local(localGone), never)); d.Action != Nothing || d.Reason != ReasonNotAMember {
		t.Fatalf("unasked: %s/%s, want nothing/not-a-member", d.Action, d.Reason)
	}
	// A member that was one (UC1: a new node for a lost member's name) is
	// still rejoined; and a person's rejoin request is still served.
	if d := Decide(cluster(3, 3, local(localGone))); d.Action != Begin {
		t.Fatalf("was a member: %s/%s, want begin", d.Action, d.Reason)
	}
	if d := Decide(cluster(3, 3, local(localGone), never, request())); d.Action != Begin {
		t.Fatalf("requested: %s/%s, want begin", d.Action, d.Reason)
	}
}

// moveOutRequest: node9's member (ID 29) replaced ours.
func moveOutRequest(s *spec) {
	s.in.Request = &Request{Action: ActionMoveOut, Target: "node9", Replacement: id(29)}
}

func replacement(serving, isLearner bool) opt {
	return member(observation.Member{ID: id(29), Name: "node9", PeerURLs: []string{peer(29)}, IsLearner: isLearner,
		Serving: serving, RaftIndex: leaderIndex, AppliedIndex: leaderIndex})
}

func TestMoveOutStopsAndRemovesOnlyWithItsReplacementServing(t *testing.T) {
	// 3 voters + the replacement, all healthy: begin, stop, remove, finish.
	if d := Decide(cluster(3, 3, local(localHealthy), replacement(true, false), moveOutRequest)); d.Action != Begin {
		t.Fatalf("begin: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	out := func(p record.Phase) func(*record.Record) {
		return func(r *record.Record) {
			r.Request, r.MoveTarget, r.MoveMemberID = ActionMoveOut, "node9", record.MemberID(id(29))
		}
	}
	d := Decide(cluster(3, 3, local(localHealthy), replacement(true, false), journalAt(record.PhaseStarted, out(record.PhaseStarted)), leaseHeld()))
	if d.Action != StopMember {
		t.Fatalf("stop: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	d = Decide(cluster(3, 2, local(localDown), verdict("down"), replacement(true, false), journalAt(record.PhaseStopped, out(record.PhaseStopped)), leaseHeld()))
	if d.Action != RemoveMember || d.MemberID != id(1) {
		t.Fatalf("remove: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	d = Decide(cluster(3, 3, local(localGone), replacement(true, false), journalAt(record.PhaseRemoved, out(record.PhaseRemoved)), leaseHeld()))
	if d.Action != Finish || d.Reason != ReasonNone {
		t.Fatalf("finish: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	cases := []struct {
		name string
		opts []opt
		want Reason
	}{
		{"replacement a learner", []opt{local(localHealthy), replacement(true, true), moveOutRequest}, ReasonMoveFailed},
		{"replacement not serving", []opt{local(localHealthy), replacement(false, false), moveOutRequest}, ReasonMoveFailed},
		{"no replacement", []opt{local(localHealthy), moveOutRequest}, ReasonMoveFailed},
		{"local member not a member", []opt{local(localGone), replacement(true, false), moveOutRequest}, ReasonBadRequest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(cluster(3, 3, c.opts...))
			if d.Action != Refuse || d.Reason != c.want {
				t.Fatalf("Decide = %s/%s (%s), want refuse/%s", d.Action, d.Reason, d.Detail, c.want)
			}
		})
	}
	// A voter down: never stopped, neither at the start nor after the
	// Lease (the open record closes without a change).
	if d := Decide(cluster(3, 2, local(localHealthy), replacement(true, false), moveOutRequest)); d.Action != Refuse || d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("a voter down at the start: %s/%s", d.Action, d.Reason)
	}
	d = Decide(cluster(3, 2, local(localHealthy), replacement(true, false), journalAt(record.PhaseStarted, out(record.PhaseStarted)), leaseHeld()))
	if d.Action != Finish || d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("a voter down after the Lease: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
}

func TestAMovedMemberIsNeverHealedUnaskedAndItsRemovalNeedsAFreshList(t *testing.T) {
	out := func(r *record.Record) {
		r.Request, r.MoveTarget, r.MoveMemberID = ActionMoveOut, "node9", record.MemberID(id(29))
	}
	done := func(r *record.Record) { out(r); r.Result = record.ResultSucceeded }
	// After the move-out: lost at once (not in the list, data dir gone),
	// and yet nothing; a person's request is still served.
	if d := Decide(cluster(3, 3, local(localGone), replacement(true, false), journalAt(record.PhaseDone, done))); d.Action != Nothing || d.Reason != ReasonMovedAway {
		t.Fatalf("after the move: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	if d := Decide(cluster(3, 3, local(localGone), replacement(true, false), journalAt(record.PhaseDone, done), request())); d.Action != Begin {
		t.Fatalf("a person's rejoin after the move: %s/%s", d.Action, d.Reason)
	}
	// Stopped, and the member list does not answer: the member is not
	// taken for removed.
	d := Decide(cluster(3, 2, local(localDown), verdict("down"), replacement(true, false), listError(), journalAt(record.PhaseStopped, out), leaseHeld()))
	if d.Action == Finish || d.Action == RemoveMember {
		t.Fatalf("no member list: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	// Restarted mid-stop: its own member down by its stop is not counted
	// as a loss (the stop finishes).
	stopping := func(r *record.Record) { out(r); r.StopAttemptedAt = t0.Add(-time.Second) }
	d = Decide(cluster(3, 2, local(localDown), verdict("down"), replacement(true, false), journalAt(record.PhaseStarted, stopping), leaseHeld()))
	if d.Action != StopMember {
		t.Fatalf("resumed mid-stop: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
}

// Review item (issue 15): a move-in is taken up, and its learner added,
// only while the source still asks for it (its Node's move-to names this
// node): checked before anything changes and again right before the add.
func TestMoveInGoesOnOnlyWhileTheSourceStillAsks(t *testing.T) {
	gone := func(s *spec) { s.in.MoveSourceGone = "node2 no longer asks to move its member here (move-to=\"\")" }
	unread := func(s *spec) { s.in.MoveSourceUnread = "the API did not answer" }
	if d := Decide(cluster(3, 3, local(localGone), moveInRequest, cfg(withStore), gone)); d.Action != Refuse || d.Reason != ReasonBadRequest {
		t.Fatalf("withdrawn before the start: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	if d := Decide(cluster(3, 3, local(localGone), moveInRequest, cfg(withStore), unread)); d.Action != Refuse || d.Reason != ReasonAPIUnavailable {
		t.Fatalf("source unreadable before the start: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	in := func(r *record.Record) {
		r.Request, r.MoveMemberID, r.MoveFrom = ActionMoveIn, record.MemberID(id(2)), "node2/a002/x"
	}
	// Stopped and snapshotted, about to add: withdrawn ends it, unread waits.
	d := Decide(cluster(3, 3, local(localGone), cfg(withStore), journalAt(record.PhaseSnapshotted, in), leaseHeld()))
	if d.Action != AddLearner {
		t.Fatalf("still asked: %s/%s (%s), want the add", d.Action, d.Reason, d.Detail)
	}
	d = Decide(cluster(3, 3, local(localGone), cfg(withStore), journalAt(record.PhaseSnapshotted, in), leaseHeld(), gone))
	if d.Action != Finish || d.Reason != ReasonBadRequest {
		t.Fatalf("withdrawn before the add: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
	d = Decide(cluster(3, 3, local(localGone), cfg(withStore), journalAt(record.PhaseSnapshotted, in), leaseHeld(), unread))
	if d.Action != Nothing || d.Reason != ReasonAPIUnavailable {
		t.Fatalf("source unreadable before the add: %s/%s (%s)", d.Action, d.Reason, d.Detail)
	}
}

// Review item (issue 41): the target's last-recovery is written on the
// target Node; whoever can write there must not make the source retire its
// member for a member the move did not add. A success counts only when it
// answers this agent's own ask and names a member that was not in the
// cluster, under its ID or its name, when the ask went out.
func TestDecideMoveRetiresOnlyForAMemberItsOwnAskAdded(t *testing.T) {
	names := func(mid uint64) func(*MoveInput) {
		return func(mi *MoveInput) { mi.Target.Answer.MemberID = mid }
	}
	cases := []struct {
		name string
		mods []func(*MoveInput)
	}{
		{"an answer to no ask of this agent", []func(*MoveInput){targetMember(false, true), answered("succeeded", false)}},
		{"an answer to an earlier ask while this one waits", []func(*MoveInput){asked, targetMember(false, true), answered("succeeded", false)}},
		{"this ask's answer names a voter of the ask's time", []func(*MoveInput){asked, answered("succeeded", true), names(id(2))}},
		{"this ask's answer names the local member", []func(*MoveInput){asked, answered("succeeded", true), names(id(1))}},
		{"this ask's answer names a replacement of another node's member", []func(*MoveInput){asked, func(mi *MoveInput) {
			mi.Obs.Members[1].ID = id(39) // node2's member replaced by a rejoin after the ask
		}, answered("succeeded", true), names(id(39))}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := DecideMove(moveIn(3, c.mods...)); d.Action == MoveRetire {
				t.Fatalf("retired the local member: %+v", d)
			}
		})
	}
	// An ask whose answer cannot be checked (no record of the members at
	// the ask: an agent from before the record) is not retired on.
	d := DecideMove(moveIn(3, func(mi *MoveInput) { mi.AskedAt = t0.Add(-time.Minute) }, targetMember(false, true), answered("succeeded", true)))
	if d.Action == MoveRetire {
		t.Fatalf("retired without a record of the ask's members: %+v", d)
	}
	// The one that counts: this ask's answer, a member new since the ask.
	if d := DecideMove(moveIn(3, asked, targetMember(false, true), answered("succeeded", true))); d.Action != MoveRetire {
		t.Fatalf("this ask's member: %s/%s (%s), want %s", d.Action, d.Reason, d.Detail, MoveRetire)
	}
}
