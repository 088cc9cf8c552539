package memberstate

import (
	"testing"
	"time"
)

func TestLearnerTrackerClocksProgressPerLearner(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var tr LearnerTracker
	steps := []struct {
		at   int
		in   []LearnerSample
		want []LearnerProgress
	}{
		// First seen: the clock starts now, unstarted or not.
		{0, []LearnerSample{{ID: 1}, {ID: 2, Serving: true, Applied: 50}},
			[]LearnerProgress{{ID: 1, Since: at(0)}, {ID: 2, Applied: 50, Since: at(0)}}},
		// No answer, or the same applied index: no progress, the clock runs.
		{10, []LearnerSample{{ID: 1}, {ID: 2, Serving: true, Applied: 50}},
			[]LearnerProgress{{ID: 1, Since: at(0)}, {ID: 2, Applied: 50, Since: at(0)}}},
		// 2 progresses; 1 starts answering (progress from nothing).
		{20, []LearnerSample{{ID: 1, Serving: true, Applied: 7}, {ID: 2, Serving: true, Applied: 51}},
			[]LearnerProgress{{ID: 1, Applied: 7, Since: at(20)}, {ID: 2, Applied: 51, Since: at(20)}}},
		// A poll that does not reach 2 is no progress and forgets nothing.
		{30, []LearnerSample{{ID: 1, Serving: true, Applied: 7}, {ID: 2}},
			[]LearnerProgress{{ID: 1, Applied: 7, Since: at(20)}, {ID: 2, Applied: 51, Since: at(20)}}},
		// 1 leaves the member list (removed or promoted): forgotten.
		{40, []LearnerSample{{ID: 2, Serving: true, Applied: 51}},
			[]LearnerProgress{{ID: 2, Applied: 51, Since: at(20)}}},
		// ... and comes back under the same ID: a fresh clock.
		{50, []LearnerSample{{ID: 1}, {ID: 2, Serving: true, Applied: 51}},
			[]LearnerProgress{{ID: 1, Since: at(50)}, {ID: 2, Applied: 51, Since: at(20)}}},
		{60, nil, []LearnerProgress{}},
	}
	for i, s := range steps {
		got := tr.Observe(at(s.at), s.in)
		if len(got) != len(s.want) {
			t.Fatalf("step %d: %+v, want %+v", i, got, s.want)
		}
		for k := range got {
			if got[k] != s.want[k] {
				t.Fatalf("step %d: %+v, want %+v", i, got, s.want)
			}
		}
	}
}
