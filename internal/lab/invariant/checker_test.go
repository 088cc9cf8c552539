package invariant

import (
	"testing"
	"time"
)

func TestUnexcusedFailuresAreThoseNoKillExplains(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	kill := []hardFault{{from: t0, to: t0.Add(5 * time.Millisecond)}}
	at := func(d time.Duration, via string) Failure { return Failure{At: t0.Add(d), Via: via} }
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
		{"long after the kill", kill, []Failure{at(2*time.Second, "api")}, 1},
		{"long before the kill", kill, []Failure{at(-time.Minute, "api")}, 1},
		{"two kills, one each", append(kill, hardFault{from: t0.Add(time.Minute), to: t0.Add(time.Minute)}),
			[]Failure{at(0, "api"), at(time.Minute, "api")}, 0},
	} {
		if got, _ := unexcused(c.fs, c.faults); len(got) != c.want {
			t.Errorf("%s: %d unexcused (%v), want %d", c.name, len(got), got, c.want)
		}
	}
}
