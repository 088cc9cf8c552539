package memberstate

import (
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// Result is one poll, assessed: the observation, the member's state, and
// every learner's progress clock.
type Result struct {
	Observation observation.Observation
	Verdict     Verdict
	// Learners is the progress of every learner in the member list (the
	// stranded-learner rule's input), remembered across polls.
	Learners []LearnerProgress
}

// Assessor turns the watchdog's observations into Results: it keeps the
// member's unhealthy run (Tracker) and the learners' progress clocks
// (LearnerTracker) across polls. Observations must come in time order from
// one goroutine.
type Assessor struct {
	grace    time.Duration
	tracker  Tracker
	learners LearnerTracker
}

// NewAssessor returns an Assessor for a member with the grace period.
func NewAssessor(grace time.Duration) *Assessor { return &Assessor{grace: grace} }

// Assess feeds one observation. maxGap is how far apart two polls may be
// and still count as one continuous unhealthy run (see Config.MaxSampleGap;
// the watchdog knows it: watchdog.SampleGap).
func (a *Assessor) Assess(o observation.Observation, maxGap time.Duration) Result {
	v := a.tracker.Observe(SampleOf(o), Config{GracePeriod: a.grace, MaxSampleGap: maxGap})
	return Result{Observation: o, Verdict: v, Learners: a.learners.Observe(o.At, learnerSamples(o))}
}

// Restarted begins the member's next unhealthy run afresh: a member just
// started again (its vanished manifest put back) gets its whole grace
// period to serve before it can be lost.
func (a *Assessor) Restarted() { a.tracker = Tracker{} }

// SampleOf turns an observation into the state tracker's input.
func SampleOf(o observation.Observation) Sample {
	return Sample{
		At: o.At, Serving: o.Local.Serving, AuthFailed: o.Local.AuthFailed, IsLearner: o.Local.IsLearner, DataDir: o.Local.DataDirClass,
		DataDirVerified: o.Local.DataDirVerified,
		Alarms:          o.Local.Alarms, HealthyVoters: o.HealthyVoters(), Voters: o.Voters(),
		HasLeader: o.LeaderID != 0, InMemberList: o.Local.Match == observation.MatchOK,
	}
}

// learnerSamples are the learners of an observation, for the learner tracker.
func learnerSamples(o observation.Observation) []LearnerSample {
	var out []LearnerSample
	for _, m := range o.Learners() {
		out = append(out, LearnerSample{ID: m.ID, Serving: m.Serving, Applied: m.AppliedIndex})
	}
	return out
}
