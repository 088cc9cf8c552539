package plan

import (
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

func TestLearnerToRemoveOnFailure(t *testing.T) {
	learner := observation.Member{ID: 0xa9, IsLearner: true}
	voter := observation.Member{ID: 0xa9}
	for _, c := range []struct {
		name    string
		phase   record.Phase
		newID   uint64
		members []observation.Member
		want    bool
	}{
		{"failed after the add: our learner goes", record.PhaseLearnerAdded, 0xa9, []observation.Member{learner}, true},
		{"failed after the start, before the promote", record.PhaseMemberStarted, 0xa9, []observation.Member{learner}, true},
		{"failed before the add: nothing of ours", record.PhaseRemoved, 0, []observation.Member{learner}, false},
		{"promoted: a voter stays", record.PhasePromoted, 0xa9, []observation.Member{voter}, false},
		{"the list shows it a voter already (promote applied, journal behind)", record.PhaseMemberStarted, 0xa9, []observation.Member{voter}, false},
		{"gone from the list already", record.PhaseLearnerAdded, 0xa9, nil, false},
		{"another learner is not ours to remove here", record.PhaseLearnerAdded, 0xb1, []observation.Member{learner}, false},
	} {
		j := record.Record{Phase: c.phase, NewMemberID: record.MemberID(c.newID)}
		id, ok := LearnerToRemoveOnFailure(j, observation.Observation{Members: c.members})
		if ok != c.want || (ok && id != c.newID) {
			t.Errorf("%s: got %x, %v; want remove=%v", c.name, id, ok, c.want)
		}
	}
}
