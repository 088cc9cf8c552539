package plan

import (
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// LearnerToRemoveOnFailure: an attempt that fails after adding its learner
// and before promoting it removes that learner again, so the cluster is left
// as before the add (one learner at a time: a learner left behind would
// block every other heal). Only a learner the journal names and the fresh
// member list still shows as a learner; a promoted member is a voter and
// stays.
func LearnerToRemoveOnFailure(j record.Record, o observation.Observation) (uint64, bool) {
	if !j.Phase.AtLeast(record.PhaseLearnerAdded) || j.Phase.AtLeast(record.PhasePromoted) || j.NewMemberID == 0 {
		return 0, false
	}
	m, ok := o.Member(uint64(j.NewMemberID))
	if !ok || !m.IsLearner {
		return 0, false
	}
	return m.ID, true
}
