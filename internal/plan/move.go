package plan

import (
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// A move (UC3, static pods) takes a healthy member to another node without
// lowering the cluster's fault tolerance: add first, then remove. Two agents
// do it, each under the Lease for its own change:
//
//  1. the source's agent (its Node carries etcd-agent.io/move-to=<target>)
//     checks the move may begin (DecideMove) and asks the target's agent
//     for it (ActionMoveIn on the target Node, naming the member replaced);
//  2. the target's agent adds its member as a learner, seeds, starts and
//     promotes it (decideIdle's move-in rules, then the usual steps with no
//     old member to remove);
//  3. once the target's member is a healthy voter, the source's agent stops
//     its member (parked, data dir quarantined) and removes it
//     (ActionMoveOut, decideMoveOut).
//
// The cluster never has fewer healthy voters than before: n healthy voters
// become n+1 when the learner is promoted, and n again when the old member
// is stopped and removed.

// Request actions besides "rejoin".
const (
	// ActionMoveIn: add this node's (never a member) member to replace
	// Request.Replaces, add first.
	ActionMoveIn = "move-in"
	// ActionMoveOut: stop and remove this node's member, now that its
	// replacement (the member named Request.Target) is a healthy voter.
	ActionMoveOut = "move-out"
)

// Move-only reason codes.
const (
	ReasonTargetNotReady         Reason = "target-not-ready"
	ReasonTargetHasMember        Reason = "target-has-member"
	ReasonNoSnapshotStore        Reason = "no-snapshot-store"
	ReasonSnapshotStoreUnreached Reason = "snapshot-store-unreachable"
	ReasonMemberNotHealthy       Reason = "member-not-healthy"
	ReasonMoveFailed             Reason = "move-failed"
	ReasonMoveTimedOut           Reason = "move-timed-out"
	ReasonMoveWaiting            Reason = "move-waiting"
)

// Move decisions (the source's side).
const (
	MoveRelay  Action = "move-relay"  // ask the target's agent (ActionMoveIn)
	MoveRetire Action = "move-retire" // stop and remove the local member (ActionMoveOut)
)

// TargetNode is what the source's agent knows of the move's target node.
type TargetNode struct {
	Name  string
	Found bool
	Ready bool
	// Unreadable: the Node could not be read now (the API erred).
	Unreadable bool
	// Asked: the target Node carries this agent's move-in request (not yet
	// taken up by its agent); OtherAsk is another request there (another
	// move's, or a person's).
	Asked    bool
	OtherAsk string
	// Answer is the target agent's last move-in outcome for this member
	// (nil: none).
	Answer *MoveAnswer
}

// MoveAnswer is the target's last-recovery of a move-in of our member.
type MoveAnswer struct {
	Result, Reason, Message string
	// MemberID is the member the move-in added (succeeded).
	MemberID uint64
	// ThisAsk: it answers this agent's current ask (not an earlier one).
	ThisAsk bool
}

// MoveInput is what DecideMove looks at.
type MoveInput struct {
	Now    time.Time
	Obs    observation.Observation
	Node   string // the source node (ours)
	Target TargetNode
	DryRun bool
	// StoreConfigured: --snapshot-store is set; StoreError says why it did
	// not answer a bounded list just now ("" = it answered).
	StoreConfigured bool
	StoreError      string
	// AskedAt is when this agent asked the target (zero: not yet); Timeout
	// bounds the whole move from then: the target's move-in and the wait
	// for the retire.
	AskedAt time.Time
	Timeout time.Duration
	// MembersAtAsk is the member list when this agent asked (recorded with
	// the ask): the target's answer counts only for a member that was not
	// in it, under its ID or its name (docs/security.md, "a forged answer").
	MembersAtAsk []AskedMember
}

// AskedMember is one member of the list at the ask.
type AskedMember struct {
	ID   uint64 `json:"id,string"`
	Name string `json:"name"`
}

// MembersOf is what MoveInput.MembersAtAsk records of an observation.
func MembersOf(o observation.Observation) []AskedMember {
	out := make([]AskedMember, 0, len(o.Members))
	for _, m := range o.Members {
		out = append(out, AskedMember{ID: m.ID, Name: m.Name})
	}
	return out
}

// DecideMove is the source's side of a move: refuse (with a reason), ask
// the target (MoveRelay), wait for it (Nothing, ReasonMoveWaiting), fail
// (Finish, the target's reason or a timeout), or retire the local member
// (MoveRetire) once the target's agent answered that its move-in of our
// member succeeded and the member it added is a healthy voter. A member
// on the target is never taken for the move's by its name: only the
// answer's member ID counts (two moves to one node add one member).
func DecideMove(in MoveInput) Decision {
	o, t := in.Obs, in.Target
	switch {
	case t.Name == "" || t.Name == in.Node:
		return refuse(ReasonBadRequest, fmt.Sprintf("move target %q: name another node than this one (%s)", t.Name, in.Node))
	case o.Local.Match != observation.MatchOK:
		return refuse(ReasonBadRequest, "the local member is not in the cluster's member list: nothing to move ("+o.Local.MatchDetail+")")
	case quorumLost(o) || o.MemberListError != "":
		if !in.AskedAt.IsZero() { // under way: wait it out, bounded
			return waitMove(in, fmt.Sprintf("%d of %d voters serve", o.ServingVoters(), o.Voters()))
		}
		return refuse(ReasonMajorityLost, fmt.Sprintf("%d of %d voters serve: no move", o.ServingVoters(), o.Voters()))
	}
	local, _ := localMember(o)
	if a := t.Answer; a != nil && a.Result == "succeeded" {
		m, ok := o.Member(a.MemberID)
		switch {
		case !a.ThisAsk || !ok && in.AskedAt.IsZero():
			// Not an answer to this agent's ask (an earlier move's, or one
			// this agent never made), or an old success whose member is
			// gone again: not this move's.
			in.Target.Answer = nil
			return DecideMove(in)
		case len(in.MembersAtAsk) == 0:
			return Decision{Action: Finish, Reason: ReasonMoveFailed, Detail: fmt.Sprintf("%s answered that it added member %x, but this agent has no record of the members when it asked: the answer cannot be told from a member that was there before; nothing stopped (check, then remove member %x by hand)", t.Name, a.MemberID, local.ID)}
		case wasMemberAtAsk(in.MembersAtAsk, a.MemberID, m.Name):
			return Decision{Action: Finish, Reason: ReasonMoveFailed, Detail: fmt.Sprintf("%s answered that it added member %x (%q), but that member, or one of its name, was in the cluster when this move asked: not a member this move added; nothing stopped", t.Name, a.MemberID, m.Name)}
		case !ok || m.IsLearner || !m.Serving:
			return waitMove(in, fmt.Sprintf("%s added member %x, which is not a serving voter now", t.Name, a.MemberID))
		case o.HealthyVoters() < o.Voters() || len(o.Learners()) > 0:
			return waitMove(in, fmt.Sprintf("%d healthy of %d voters (learners %d): the old member is stopped only when every voter is healthy",
				o.HealthyVoters(), o.Voters(), len(o.Learners())))
		case in.DryRun:
			return refuse(ReasonDryRun, fmt.Sprintf("would stop and remove member %x (%s) now that %x on %s is a healthy voter", local.ID, local.Name, m.ID, t.Name))
		}
		return Decision{Action: MoveRetire, MemberID: local.ID, Detail: fmt.Sprintf("%x on %s is a healthy voter: stop and remove %x", m.ID, t.Name, local.ID)}
	}
	if !in.AskedAt.IsZero() {
		if a := t.Answer; a != nil && a.ThisAsk {
			return Decision{Action: Finish, Reason: ReasonMoveFailed, Detail: fmt.Sprintf("the agent on %s answered the move-in %s (%s): %s", t.Name, a.Result, a.Reason, a.Message)}
		}
		return waitMove(in, fmt.Sprintf("asked the agent on %s; waiting for its member to join", t.Name))
	}
	n, h := o.Voters(), o.HealthyVoters()
	switch {
	case t.Unreadable:
		return wait(ReasonMoveWaiting, fmt.Sprintf("node %s cannot be read now; asking again", t.Name))
	case !t.Found:
		return refuse(ReasonBadRequest, fmt.Sprintf("no node %q", t.Name))
	case !t.Ready:
		return refuse(ReasonTargetNotReady, fmt.Sprintf("node %s is not Ready", t.Name))
	case t.OtherAsk != "":
		return refuse(ReasonTargetHasMember, fmt.Sprintf("node %s has another request pending (%s): it is answered first", t.Name, t.OtherAsk))
	case hasMemberNamed(o, t.Name, local.ID):
		return refuse(ReasonTargetHasMember, fmt.Sprintf("node %s already has a member, and no answer of the target's agent to this agent's ask ties it to this move (an earlier move's, or this agent's record of its ask is gone): look at it; remove the member you do not want by hand", t.Name))
	case !local.Serving || !observation.DataDirUsable(o.Local.DataDirClass):
		return refuse(ReasonMemberNotHealthy, fmt.Sprintf("member %x is not healthy (%s): a move takes a healthy member; heal it instead", local.ID, o.Local.DataDirClass))
	case local.IsLearner:
		return refuse(ReasonMemberNotHealthy, fmt.Sprintf("member %x is a learner", local.ID))
	case h < n:
		return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("%d healthy of %d voters: a move begins only when every voter is healthy", h, n))
	case n < 2:
		return refuse(ReasonWouldLoseQuorum, "a one-member cluster cannot move add first: stopping its member in a cluster of two loses the quorum (restore a snapshot on the new node instead)")
	case len(o.Learners()) > 0:
		ls := o.Learners()
		return refuse(ReasonLearnerPresent, fmt.Sprintf("learner %x (%s) is present; one learner at a time", ls[0].ID, ls[0].Name))
	case !in.StoreConfigured:
		return refuse(ReasonNoSnapshotStore, "a move needs --snapshot-store: the member's snapshot goes there before anything changes")
	case in.StoreError != "":
		return refuse(ReasonSnapshotStoreUnreached, "the snapshot store did not answer: "+in.StoreError)
	case in.DryRun:
		return refuse(ReasonDryRun, fmt.Sprintf("would ask %s to add its member as a learner (seeded), promote it (%d voters, quorum %d), then stop and remove %x (%d voters, quorum %d)",
			t.Name, n+1, memberstate.Quorum(n+1), local.ID, n, memberstate.Quorum(n)))
	}
	return Decision{Action: MoveRelay, MemberID: local.ID, Detail: fmt.Sprintf("ask %s to add its member in place of %x", t.Name, local.ID)}
}

// wasMemberAtAsk: the member id, or a member named name, was in the list at
// the ask ("" is the name of an unstarted member: it names none).
func wasMemberAtAsk(at []AskedMember, id uint64, name string) bool {
	for _, m := range at {
		if m.ID == id || name != "" && m.Name == name {
			return true
		}
	}
	return false
}

// waitMove waits, bounded by the move's timeout from the ask.
func waitMove(in MoveInput, detail string) Decision {
	if !in.AskedAt.IsZero() && in.Timeout > 0 && in.Now.Sub(in.AskedAt) > in.Timeout {
		return Decision{Action: Finish, Reason: ReasonMoveTimedOut, Detail: fmt.Sprintf("%s for %s since the move was asked: given up (%s)", detail, in.Now.Sub(in.AskedAt).Round(time.Second), in.Timeout)}
	}
	return wait(ReasonMoveWaiting, detail)
}

// hasMemberNamed: a member other than exclude has the name.
func hasMemberNamed(o observation.Observation, name string, exclude uint64) bool {
	_, ok := otherMemberNamed(o, name, exclude)
	return ok
}

// otherMemberNamed finds the member named name other than exclude.
func otherMemberNamed(o observation.Observation, name string, exclude uint64) (observation.Member, bool) {
	m, ok := memberNamed(o, name)
	if ok && m.ID == exclude {
		return observation.Member{}, false
	}
	return m, ok
}

// checkMoveIn: the target's side may begin only for a member that was
// never in the cluster, replacing a member that is a healthy voter, with
// every voter healthy (the learner it adds becomes the n+1st voter).
func checkMoveIn(in Input, cfg Config) (Decision, bool) {
	o, r := in.Obs, in.Request
	if !cfg.SnapshotStore {
		return refuse(ReasonNoSnapshotStore, "a move needs --snapshot-store on this node's agent: the member's snapshot goes there before anything changes"), false
	}
	if in.MoveSourceUnread != "" {
		return refuse(ReasonAPIUnavailable, "whether the move's source still asks for it cannot be read: "+in.MoveSourceUnread), false
	}
	if in.MoveSourceGone != "" {
		return refuse(ReasonBadRequest, in.MoveSourceGone), false
	}
	if _, inList := localMember(o); inList || o.Local.Match == observation.MatchAmbiguous {
		return refuse(ReasonTargetHasMember, fmt.Sprintf("the local member %s is already in the member list (%s): a move adds only a new member", o.Local.Name, o.Local.Match)), false
	}
	if m, ok := memberWithPeerURLs(o, o.Local.PeerURLs, 0); ok {
		return refuse(ReasonTargetHasMember, fmt.Sprintf("member %x (%s) already has this node's peer URLs", m.ID, m.Name)), false
	}
	switch c := o.Local.DataDirClass; c {
	case "missing", "empty", "corrupt", observation.DataDirNotADirectory:
		// Corrupt: what etcd leaves when it refuses to join as a
		// non-member (a member dir, no WAL). The stop quarantines it, and
		// a file in place of the data dir as it is.
	default:
		return refuse(ReasonTargetHasMember, fmt.Sprintf("the data dir %s is %s: it holds etcd data; a move adds a new member only where there is none (look at it, move it aside)", o.Local.DataDir, c)), false
	}
	old, ok := o.Member(r.Replaces)
	if r.Replaces == 0 || !ok || old.IsLearner {
		return refuse(ReasonBadRequest, fmt.Sprintf("the member to replace (%x) is not a voter of the cluster", r.Replaces)), false
	}
	if !old.Serving {
		return refuse(ReasonMemberNotHealthy, fmt.Sprintf("the member to replace (%x) does not serve: heal it instead", r.Replaces)), false
	}
	if h, n := o.HealthyVoters(), o.Voters(); h < n || n < 2 {
		return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("%d healthy of %d voters: a move begins only when every voter is healthy, in a cluster of two or more", h, n)), false
	}
	return Decision{}, true
}

// checkMoveOut: the source's side stops and removes its member only when
// it serves, its replacement (the voter named r.Target) serves, and every
// voter is healthy: the stop leaves n healthy of n+1 voters, the remove n
// of n.
func checkMoveOut(in Input, stopAttempted bool) (Decision, bool) {
	o, r := in.Obs, in.Request
	local, inList := localMember(o)
	if !inList || local.IsLearner {
		return refuse(ReasonBadRequest, "the local member is not a voter: nothing to move out"), false
	}
	m, ok := o.Member(r.Replacement)
	if r.Replacement == 0 || r.Replacement == local.ID || !ok || m.IsLearner || !m.Serving {
		return refuse(ReasonMoveFailed, fmt.Sprintf("the replacement %x (on %s) is not a serving voter", r.Replacement, r.Target)), false
	}
	h, n := o.HealthyVoters(), o.Voters()
	if stopAttempted && !local.Serving {
		h++ // down by our own stop: resuming it is no new loss
	}
	if h < n || len(o.Learners()) > 0 {
		return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("%d healthy of %d voters (learners %d): the old member is stopped only when every voter is healthy", h, n, len(o.Learners()))), false
	}
	return Decision{}, true
}

// decideMoveOut: a move-out is open and the member stopped: remove it (rule
// 2 as for a rejoin), then finish; nothing is added back.
func decideMoveOut(in Input) Decision {
	o, j := in.Obs, in.Journal
	if o.MemberListError != "" || quorumLost(o) || foreignOnly(o) {
		// Gone from a list that did not answer proves nothing.
		return wait(ReasonMajorityLost, "no fresh member list with a quorum: the old member's removal waits")
	}
	if old, ok := o.Member(uint64(j.OldMemberID)); ok && j.OldMemberID != 0 {
		return decideRemove(o, old)
	}
	return Decision{Action: Finish, Detail: fmt.Sprintf("member %x stopped and removed; it serves from its new node now", uint64(j.OldMemberID))}
}
