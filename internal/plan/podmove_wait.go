package plan

import (
	"fmt"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// A pod move after its release (the claim deleted, the held pod gone): the
// StatefulSet re-creates both, the scheduler binds the pod to the target
// through the reserved PV, and the target's agent adds the member as a
// learner, seeds, promotes and verifies it, under the cluster's Lease. The
// source's journal stays open meanwhile, without the Lease, and closes:
//
//   - succeeded once the member (its name, a new ID) is a voter that
//     answers and the target's agent answered the move succeeded for that
//     very member (its last-recovery on the pod, naming this move's source
//     and the member: rejoined, promoted, HashKV equal);
//   - failed, move-timed-out, at the deadline (Config.MoveDeadline from the
//     claim's release), with nothing more done: the old PV stays Retain
//     with the data on it, the StatefulSet's pod is left where it is.
//
// In between each poll decides Nothing (ReasonAwaitingMoveTarget), saying
// what it waits for and how much of the deadline is left.

// defaultMoveDeadline is Config.MoveDeadline when none is configured.
const defaultMoveDeadline = 30 * time.Minute

// awaitingMoveTarget: an open pod move whose member was removed and whose
// claim and held pod were released: all that is left is the target
// agent's work. Also while the move's objects cannot be read: a released
// move only ever waits then (nothing destructive, no Lease).
func awaitingMoveTarget(in Input) bool {
	j, c := in.Journal, in.Claim
	if !j.Active() || j.Request != ActionMoveAway || j.ClaimReleasedAt.IsZero() || !j.Phase.AtLeast(record.PhaseRemoved) {
		return false
	}
	if c == nil || c.Err != "" {
		return true
	}
	return (!c.ClaimBound || c.ClaimDeleting) && !c.PodOnNode && c.ReservedPV != ""
}

// awaitMoveTarget decides a released pod move: succeeded, waiting, or
// timed out (see above).
func awaitMoveTarget(in Input, cfg Config) Decision {
	j, c := in.Journal, in.Claim
	deadline := cfg.MoveDeadline
	if deadline <= 0 {
		deadline = defaultMoveDeadline
	}
	var waited time.Duration
	if !j.ClaimReleasedAt.IsZero() {
		// Else released by another hand (a PVC retention policy, a
		// person): waited for nothing yet. The attempt's own timeout
		// bounds it, and settleMoveAway then journals the release.
		waited = max(in.Now.Sub(j.ClaimReleasedAt), 0)
	}
	m, found := movedMember(in.Obs, j)
	var answer *MoveAnswer
	if c != nil && c.Err == "" {
		answer = c.TargetAnswer
	}
	if found && !m.IsLearner && m.Serving && answer != nil && answer.Result == record.ResultSucceeded && answer.MemberID == m.ID {
		return Decision{Action: Finish, Detail: fmt.Sprintf("member %s serves as voter %x on %s (was %x), rejoined and verified by its agent (%s), seeded from %s, %s after the release",
			j.Member, m.ID, j.MoveTarget, uint64(j.OldMemberID), answer.Message, j.StoreKey, waited.Round(time.Second))}
	}
	what := movePending(in, m, found, answer)
	if waited >= deadline {
		return Decision{Action: Finish, Reason: ReasonMoveTimedOut, Detail: fmt.Sprintf("not done within %s of the claim's release: still %s. The move failed; nothing more is done: the old PV keeps the data (Retain), the StatefulSet's pod is left as it is (a person's to look at on %s)",
			deadline, what, j.MoveTarget)}
	}
	return wait(ReasonAwaitingMoveTarget, fmt.Sprintf("released to %s, waiting (without the Lease) %s: %s of %s waited, %s left",
		j.MoveTarget, what, waited.Round(time.Second), deadline, (deadline-waited).Round(time.Second)))
}

// movePending says what a released move waits for now.
func movePending(in Input, m observation.Member, found bool, answer *MoveAnswer) string {
	j, c := in.Journal, in.Claim
	switch {
	case c == nil || c.Err != "":
		why := "not read"
		if c != nil {
			why = c.Err
		}
		return fmt.Sprintf("for member %s on %s; the move's objects cannot be read now: %s", j.Member, j.MoveTarget, why)
	case c.PodNode != j.MoveTarget && !found:
		where := "not scheduled yet"
		if c.PodNode != "" {
			where = "bound to " + c.PodNode
		}
		return fmt.Sprintf("for the StatefulSet's pod of member %s to be scheduled on %s (PV %s; now %s)", j.Member, j.MoveTarget, c.ReservedPV, where)
	case !found:
		return fmt.Sprintf("for %s's agent to add member %s as a learner, seeded from %s", j.MoveTarget, j.Member, j.StoreKey)
	case m.IsLearner:
		return fmt.Sprintf("for learner %x of member %s to catch up and be promoted", m.ID, j.Member)
	case !m.Serving:
		return fmt.Sprintf("for voter %x of member %s to answer", m.ID, j.Member)
	case answer != nil && answer.Result != record.ResultSucceeded:
		return fmt.Sprintf("for %s's agent to verify voter %x: it answered %s (%s: %s) and tries again", j.MoveTarget, m.ID, answer.Result, answer.Reason, answer.Message)
	}
	return fmt.Sprintf("for %s's agent to answer that voter %x of member %s is verified (HashKV equal)", j.MoveTarget, m.ID, j.Member)
}

// movedMember is the moved member as it is in the list now: its name (or,
// not started yet, its peer URL), under an ID other than the removed one.
func movedMember(o observation.Observation, j record.Record) (observation.Member, bool) {
	for _, m := range o.Members {
		if m.ID == uint64(j.OldMemberID) {
			continue
		}
		if m.Name == j.Member || (m.Name == "" && slices.ContainsFunc(m.PeerURLs, func(u string) bool { return slices.Contains(j.PeerURLs, u) })) {
			return m, true
		}
	}
	return observation.Member{}, false
}
