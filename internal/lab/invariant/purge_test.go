package invariant

import (
	"slices"
	"testing"
	"time"
)

func TestOnlyAPurgeFatalOnTheWipedNodeSoonAfterTheWipeIsExcused(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 19, 0, 0, 0, time.UTC)
	wipes := []NodeEvent{{Node: "node2", At: t0}, {Node: "node3", At: t0.Add(time.Minute)}}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, c := range []struct {
		name  string
		fatal NodeEvent
		want  bool
	}{
		{"the wiped node at its next tick", NodeEvent{"node2", at(400 * time.Millisecond)}, true},
		{"the wiped node a whole tick later", NodeEvent{"node2", at(PurgeTick)}, true},
		{"the wiped node after more than a tick", NodeEvent{"node2", at(PurgeTick + time.Millisecond)}, false},
		{"the wiped node before its wipe", NodeEvent{"node2", at(-time.Second)}, false},
		{"a node nobody wiped", NodeEvent{"node1", at(time.Second)}, false},
		{"another wiped node at its own wipe's tick", NodeEvent{"node3", at(time.Minute + 10*time.Second)}, true},
		{"another wiped node at the first wipe's tick", NodeEvent{"node3", at(10 * time.Second)}, false},
	} {
		got := WipedPurgeCrashes(wipes, []NodeEvent{c.fatal})
		if excused := slices.Contains(got, c.fatal.At); excused != c.want || len(got) > 1 {
			t.Errorf("%s: excused %v (%v), want %v", c.name, excused, got, c.want)
		}
	}
	if got := WipedPurgeCrashes(nil, []NodeEvent{{"node2", at(time.Second)}}); len(got) != 0 {
		t.Errorf("no wipe: %v excused", got)
	}
}
