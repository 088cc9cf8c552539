package invariant

import (
	"testing"
	"time"
)

func TestUnexcusedFailuresAreThoseNoKillExplains(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	kill := []hardFault{{from: t0, to: t0.Add(5 * time.Millisecond)}}
	at := func(d time.Duration, via string) Failure { return Failure{At: t0.Add(d), Via: via} }
	failed := func(d time.Duration, via, err string) Failure { return Failure{At: t0.Add(d), Via: via, Err: err} }
	handOff := []hardFault{{from: t0, to: t0.Add(100 * time.Millisecond), handOff: true}}
	for _, c := range []struct {
		name   string
		faults []hardFault
		fs     []Failure
		want   int
	}{
		{"no kill: every failure counts", nil, []Failure{at(0, "api")}, 1},
		{"in flight at the kill", kill, []Failure{at(-20*time.Millisecond, "api")}, 0},
		{"one per path", kill, []Failure{at(-20*time.Millisecond, "api"), at(-10*time.Millisecond, "etcd")}, 0},
		{"a second api failure at the same kill", kill, []Failure{at(-20*time.Millisecond, "api"), at(50*time.Millisecond, "api")}, 1},
		{"routed to the dead connection just after", kill, []Failure{at(80*time.Millisecond, "etcd")}, 0},
		// Seen in the layout matrix on a loaded machine: a Put started
		// 245 ms after the SIGKILL went to the dead member's connection
		// before gRPC's reader had seen its EOF.
		{"on the dead connection, its break not yet read", kill, []Failure{failed(245*time.Millisecond, "etcd",
			"rpc error: code = Unavailable desc = error reading from server: EOF")}, 0},
		{"reset on the dead connection", kill, []Failure{failed(600*time.Millisecond, "etcd",
			"rpc error: code = Unavailable desc = error reading from server: read tcp 127.0.0.1:40000->127.0.0.2:2379: read: connection reset by peer")}, 0},
		{"another error after the kill", kill, []Failure{failed(245*time.Millisecond, "etcd", "etcdserver: request timed out")}, 1},
		{"a broken connection long after the kill", kill, []Failure{failed(2*time.Second, "etcd", "rpc error: code = Unavailable desc = error reading from server: EOF")}, 1},
		{"long after the kill", kill, []Failure{at(2*time.Second, "api")}, 1},
		{"long before the kill", kill, []Failure{at(-time.Minute, "api")}, 1},
		{"proposal dropped at a leader hand-off", handOff, []Failure{failed(50*time.Millisecond, "etcd", "rpc error: code = Unknown desc = raft proposal dropped")}, 0},
		{"forwarded to the leader as it handed off, timed out", handOff, []Failure{failed(20*time.Millisecond, "etcd", "etcdserver: request timed out")}, 0},
		{"each write proposed during the hand-off", handOff, []Failure{failed(10*time.Millisecond, "etcd", "raft proposal dropped"), failed(90*time.Millisecond, "etcd", "etcdserver: request timed out")}, 0},
		{"proposed before the hand-off began", handOff, []Failure{failed(-time.Second, "etcd", "raft proposal dropped")}, 1},
		{"another error at a hand-off", handOff, []Failure{failed(50*time.Millisecond, "etcd", "etcdserver: mvcc: database space exceeded")}, 1},
		{"a timeout long after the hand-off", handOff, []Failure{failed(5*time.Second, "api", "etcdserver: request timed out")}, 1},
		{"no leader is not a transfer's", handOff, []Failure{failed(50*time.Millisecond, "etcd", "etcdserver: no leader")}, 1},
		{"two kills, one each", append(kill, hardFault{from: t0.Add(time.Minute), to: t0.Add(time.Minute)}),
			[]Failure{at(0, "api"), at(time.Minute, "api")}, 0},
	} {
		if got, _, _ := unexcused(c.fs, c.faults); len(got) != c.want {
			t.Errorf("%s: %d unexcused (%v), want %d", c.name, len(got), got, c.want)
		}
	}
}

// Only a clean hand-off of the checker's own cluster excuses anything: a
// "hand-off" that took longer than a transfer may was an election.
func TestOnlyCleanHandOffsOfTheClusterExcuse(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 5, 0, 0, 0, time.UTC)
	hs := []LeaderHandOff{
		{ClusterID: 7, From: t0, To: t0.Add(150 * time.Millisecond)},
		{ClusterID: 8, From: t0, To: t0.Add(150 * time.Millisecond)},
		{ClusterID: 7, From: t0.Add(time.Minute), To: t0.Add(time.Minute + 8*time.Second)},
	}
	got := handOffFaults(hs, 7)
	if len(got) != 1 || !got[0].handOff || !got[0].from.Equal(t0) {
		t.Fatalf("excusing hand-offs %+v, want only cluster 7's first", got)
	}
	late := Failure{At: t0.Add(time.Minute + time.Second), Via: "etcd", Err: "raft proposal dropped"}
	if bad, _, _ := unexcused([]Failure{late}, got); len(bad) != 1 {
		t.Fatal("a write failed during an 8 s 'hand-off' was excused")
	}
}

// UnexcusedByCrashes applies Finish's rule for member crashes: a write in
// flight at the crash (begun before it, or a broken connection up to 1 s
// after it) is excused, one per path per crash; a failure 2 s later is not.
func TestUnexcusedByCrashesExcusesOnlyWritesInFlightAtTheCrash(t *testing.T) {
	crash := time.Date(2026, 12, 6, 21, 30, 55, 691e6, time.UTC)
	eof := "rpc error: code = Unavailable desc = error reading from server: EOF"
	fs := []Failure{
		{At: crash.Add(-2 * time.Millisecond), Via: "api", Err: eof},
		{At: crash.Add(-time.Millisecond), Via: "api", Err: eof}, // a second one on the same path
		{At: crash.Add(2 * time.Second), Via: "etcd", Err: eof},
	}
	got := UnexcusedByCrashes(fs, []time.Time{crash})
	if len(got) != 2 || got[0].At != fs[1].At || got[1].At != fs[2].At {
		t.Fatalf("unexcused %+v; want the second api failure (one per path per crash) and the one 2 s later", got)
	}
}
