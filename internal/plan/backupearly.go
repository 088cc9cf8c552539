package plan

// The pre-change backup while the member stops: the backup is a read from a
// serving peer under the Lease and changes nothing, so it may stream while
// the local member is being stopped instead of after; TakeSnapshot waits
// for it, so it still ends before any membership change (docs/design.md §6 step 3).
// The stop of a member that is already down is all settle time (a kubelet
// noticing a parked manifest), and a real kubelet's is seconds.

import (
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// stopWithBackup is the stop, naming for a rejoin or a move-in the member
// the pre-change backup may stream from meanwhile (PickSource's choice). A
// move-away took its snapshot before the stop, a move-out takes none; and
// without a quorum nothing streams (the stop itself is decided on the same
// observation).
func stopWithBackup(in Input) Decision {
	j := in.Journal
	if j.Request == ActionMoveAway || j.Request == ActionMoveOut || quorumLost(in.Obs) ||
		(j.OldMemberID != 0 && in.Obs.LeaderID == uint64(j.OldMemberID)) {
		// (A leader hands leadership off to a follower first: the one
		// PickSource would stream from now.)
		return Decision{Action: StopMember}
	}
	src, why, err := PickSource(in.Obs, uint64(j.OldMemberID))
	if err != nil {
		return Decision{Action: StopMember}
	}
	return Decision{Action: StopMember, SourceID: src.ID, Detail: "the pre-change backup streams meanwhile from " + why}
}

// backupSourceServing says whether the member a backup of this attempt
// streams from (streaming: Input.BackupStreamingFrom) is still a serving
// voter other than the member being replaced, and not the leader while a
// follower serves: its backup is then taken as the pre-change backup;
// else a new one is streamed from PickSource's.
func backupSourceServing(o observation.Observation, streaming, oldID uint64) (observation.Member, bool) {
	if streaming == 0 || streaming == oldID {
		return observation.Member{}, false
	}
	m, ok := o.Member(streaming)
	if !ok || !m.Serving || m.IsLearner || len(m.ClientURLs) == 0 {
		return observation.Member{}, false
	}
	if m.IsLeader || o.LeaderID == m.ID {
		// It leads now: a follower's stream keeps the leader's CPU for
		// the API, as PickSource's does.
		if f, _, err := PickSource(o, oldID); err == nil && f.ID != m.ID {
			return observation.Member{}, false
		}
	}
	return m, true
}
