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

// Only a learner's refusal is set apart for a 3.5 lab; any other failure
// (a timeout, a closed connection) still counts.
func TestOnlyALearnersRefusalIsSetApart(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	learnerAll := []Membership{{At: t0, Members: []Member{{ID: 1}, {ID: 2, Learner: true}}}}
	rest, refused := splitLearnerRefusals([]Failure{
		{At: t0, Via: "api", Err: "etcdserver: rpc not supported for learner"},
		{At: t0, Via: "etcd", Err: "rpc error: code = Unavailable desc = etcdserver: rpc not supported for learner"},
		{At: t0, Via: "api", Err: "rpc error: code = Unavailable desc = error reading from server: EOF"},
		{At: t0, Via: "etcd", Err: "context deadline exceeded"},
	}, learnerAll)
	if len(refused) != 2 || len(rest) != 2 || rest[0].Err != "rpc error: code = Unavailable desc = error reading from server: EOF" {
		t.Fatalf("refused %v, rest %v", refused, rest)
	}
}

// A learner's refusal is set apart only while the membership watch saw a
// learner (issue 40): a regression that kept a learner refusing writes
// once promoted, or a refusal with no learner at all, still fails the row.
func TestALearnersRefusalIsSetApartOnlyWhileALearnerIsInTheCluster(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	voters := []Member{{ID: 1}, {ID: 3}}
	withLearner := []Member{{ID: 1}, {ID: 3}, {ID: 2, Learner: true}}
	promoted := []Member{{ID: 1}, {ID: 3}, {ID: 2}}
	history := []Membership{
		{At: at(0), Members: voters},
		// the learner was added after the poll at 10 s, seen at 10.1 s
		{Since: at(10 * time.Second), At: at(10*time.Second + 100*time.Millisecond), Members: withLearner},
		// promoted after the poll at 20 s, seen at 20.1 s
		{Since: at(20 * time.Second), At: at(20*time.Second + 100*time.Millisecond), Members: promoted},
	}
	for _, c := range []struct {
		name string
		at   time.Duration
		want bool
	}{
		{"before any learner", 5 * time.Second, false},
		{"just before the learner was seen, after the last poll without it", 10*time.Second + 50*time.Millisecond, true},
		{"while the learner is listed", 15 * time.Second, true},
		{"between the last poll with the learner and the first without", 20*time.Second + 50*time.Millisecond, true},
		{"a write answered within the slack after its promotion was seen", 20*time.Second + 100*time.Millisecond + LearnerRefusalSlack, true},
		{"seconds after the promotion", 25 * time.Second, false},
		{"long before the learner was seen", 9 * time.Second, false},
	} {
		_, refused := splitLearnerRefusals([]Failure{{At: at(c.at), Via: "api", Err: "etcdserver: rpc not supported for learner"}}, history)
		if got := len(refused) == 1; got != c.want {
			t.Errorf("%s (+%s): set apart %v, want %v", c.name, c.at, got, c.want)
		}
	}
	if _, refused := splitLearnerRefusals([]Failure{{At: at(time.Second), Err: learnerRefusal}}, nil); len(refused) != 0 {
		t.Errorf("no membership seen at all: set apart %v", refused)
	}
}
