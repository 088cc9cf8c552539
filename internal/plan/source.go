package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// PickSource chooses the peer to stream the snapshot from: a serving voter
// other than exclude (the local member) and not the leader, with the highest
// applied index (the freshest copy; ties go to the lowest ID so the choice
// is stable). The leader is chosen only when no follower serves, because a
// snapshot costs the sender disk and network that the leader needs for
// replication. Members without a client URL cannot be streamed from and are
// skipped. The reason says why the member was chosen. It fails when no
// other voter serves.
func PickSource(obs observation.Observation, exclude uint64) (observation.Member, string, error) {
	var followers, leaders []observation.Member
	for _, m := range obs.Members {
		if m.IsLearner || !m.Serving || m.ID == exclude || len(m.ClientURLs) == 0 {
			continue
		}
		if m.IsLeader || (obs.LeaderID != 0 && m.ID == obs.LeaderID) {
			leaders = append(leaders, m)
		} else {
			followers = append(followers, m)
		}
	}
	freshest := func(a, b observation.Member) int {
		if c := cmp.Compare(b.AppliedIndex, a.AppliedIndex); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	}
	if len(followers) > 0 {
		slices.SortFunc(followers, freshest)
		m := followers[0]
		return m, fmt.Sprintf("follower %s (%x) has the highest applied index (%d) of %d serving follower(s)",
			m.Name, m.ID, m.AppliedIndex, len(followers)), nil
	}
	if len(leaders) > 0 {
		slices.SortFunc(leaders, freshest)
		m := leaders[0]
		return m, fmt.Sprintf("no follower serves; using the leader %s (%x), applied index %d", m.Name, m.ID, m.AppliedIndex), nil
	}
	return observation.Member{}, "", errors.New("no serving voter other than the local member to stream a snapshot from")
}
