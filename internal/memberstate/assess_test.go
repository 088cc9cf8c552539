package memberstate

import (
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// Every learner of the member list, ours or not, feeds the learner
// tracker (the stranded-learner clock); voters do not.
func TestLearnerSamplesAreTheLearnersOfTheList(t *testing.T) {
	o := observation.Observation{At: time.Now(), Members: []observation.Member{
		{ID: 1, Serving: true, AppliedIndex: 90},
		{ID: 2, IsLearner: true},
		{ID: 3, IsLearner: true, Serving: true, AppliedIndex: 70},
	}}
	got := learnerSamples(o)
	want := []LearnerSample{{ID: 2}, {ID: 3, Serving: true, Applied: 70}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("learnerSamples = %+v, want %+v", got, want)
	}
}
