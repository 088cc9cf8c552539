package memberstate

import "time"

// LearnerSample is one learner as one poll saw it.
type LearnerSample struct {
	ID      uint64
	Serving bool   // answered Status in this poll (AppliedIndex is known)
	Applied uint64 // its applied index (meaningful only when Serving)
}

// LearnerProgress is what the LearnerTracker remembers of one learner:
// the highest applied index seen and since when it has not moved past it.
// Since is when the learner was first seen, or last seen to progress.
type LearnerProgress struct {
	ID      uint64    `json:"id"`
	Applied uint64    `json:"applied"`
	Since   time.Time `json:"since"`
}

// LearnerTracker remembers, across polls, the progress of every learner in
// the member list, the agent's own or not: the input of the stranded-learner
// rule (plan). A learner first seen starts its clock then (a restarted agent
// starts every clock afresh: a stranded learner is rolled back later, never
// sooner). A learner that does not answer makes no progress; one that
// leaves the member list is forgotten. The zero value is ready to use. Pure
// (time comes with each call) and not safe for concurrent use.
type LearnerTracker struct {
	seen map[uint64]LearnerProgress
}

// Observe feeds the learners of one poll at time at (in time order) and
// returns their progress, in the order given.
func (t *LearnerTracker) Observe(at time.Time, learners []LearnerSample) []LearnerProgress {
	next := make(map[uint64]LearnerProgress, len(learners))
	out := make([]LearnerProgress, 0, len(learners))
	for _, l := range learners {
		p, ok := t.seen[l.ID]
		switch {
		case !ok:
			p = LearnerProgress{ID: l.ID, Since: at}
			if l.Serving {
				p.Applied = l.Applied
			}
		case l.Serving && l.Applied > p.Applied:
			p.Applied, p.Since = l.Applied, at
		}
		next[l.ID] = p
		out = append(out, p)
	}
	t.seen = next
	return out
}
