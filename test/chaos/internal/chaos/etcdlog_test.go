package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// etcdLine is a log line as etcd 3.6 writes it for a membership change.
func etcdLine(at time.Time, msg, field string, id uint64) string {
	return fmt.Sprintf(`{"level":"info","ts":"%s","caller":"membership/cluster.go:424","msg":%q,"cluster-id":"c90a7b2d821ec775","local-member-id":"ccb2f4ae58b3da07",%q:"%x"}`,
		at.UTC().Format(time.RFC3339Nano), msg, field, id)
}

func TestLoggedChangesKeepsTheEarliestOfEveryMember(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	a := filepath.Join(dir, "etcd-node1_etcd.log")
	b := filepath.Join(dir, "etcd-node2_etcd.log")
	write := func(p string, lines ...string) {
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\nnot json\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(a, etcdLine(t0.Add(2*time.Second), "added member", "added-peer-id", 0xbeef),
		etcdLine(t0.Add(3*time.Second), "promote member", "promoted-member-id", 0xbeef))
	// node2 applied the same changes earlier, and replays the add after a restart.
	write(b, etcdLine(t0.Add(time.Second), "added member", "added-peer-id", 0xbeef),
		etcdLine(t0.Add(4*time.Second), "removed member", "removed-remote-peer-id", 0xdead),
		etcdLine(t0.Add(9*time.Second), "added member", "added-peer-id", 0xbeef))
	got := LoggedChanges([]string{a, b, filepath.Join(dir, "missing.log")})
	want := []LoggedChange{{"add", 0xbeef, t0.Add(time.Second)}, {"promote", 0xbeef, t0.Add(3 * time.Second)}, {"remove", 0xdead, t0.Add(4 * time.Second)}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Op != want[i].Op || got[i].ID != want[i].ID || !got[i].At.Equal(want[i].At) {
			t.Fatalf("change %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestUnseenChangesFindsAChangeBetweenPolls(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	voters := []invariant.Member{{ID: 1, Name: "node1"}, {ID: 2, Name: "node2"}, {ID: 3, Name: "node3"}}
	h := []invariant.Membership{
		{Since: t0, At: t0, Members: voters},
		// 3 removed and 4 added as a learner and promoted, all between two polls.
		{Since: t0.Add(10 * time.Second), At: t0.Add(10*time.Second + 100*time.Millisecond),
			Members: []invariant.Member{voters[0], voters[1], {ID: 4, Name: "node3"}}},
		{Since: t0.Add(30 * time.Second), At: t0.Add(30 * time.Second), Members: []invariant.Member{voters[0], voters[1], {ID: 4, Name: "node3"}}},
	}
	in := t0.Add(10*time.Second + 50*time.Millisecond)
	seen := []LoggedChange{
		{"add", 1, t0.Add(-time.Minute)}, // bootstrap: before the watch
		{"remove", 3, in}, {"add", 4, in}, {"promote", 4, in},
	}
	if v := UnseenChanges(seen, h); len(v) != 0 {
		t.Fatalf("changes the watch saw reported unseen: %v", v)
	}
	// An add and a remove of member 5 the watch never saw (between two
	// polls: the list is the same on both sides).
	missed := append(seen, LoggedChange{"add", 5, t0.Add(20 * time.Second)}, LoggedChange{"remove", 5, t0.Add(20*time.Second + 50*time.Millisecond)})
	v := UnseenChanges(missed, h)
	if len(v) != 2 || !strings.Contains(v[0], "add of member 5") || !strings.Contains(v[1], "remove of member 5") {
		t.Fatalf("want the add and the remove of member 5 reported, got %v", v)
	}
	// A logged change of a member the watch saw change, but at another time.
	late := append(seen, LoggedChange{"remove", 4, t0.Add(20 * time.Second)})
	if v := UnseenChanges(late, h); len(v) != 1 || !strings.Contains(v[0], "remove of member 4") {
		t.Fatalf("want the remove of member 4 at +20s reported, got %v", v)
	}
}
