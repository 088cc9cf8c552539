package demo

import (
	"slices"
	"testing"
	"time"
)

// The timeline says a long step when it is first seen, then at most once a
// second while it runs, with its ETA (or that none is known yet), and once
// when it ends.
func TestTheTimelineSaysHowFarALongStepIs(t *testing.T) {
	var p progressLines
	t0 := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
	stream := func(r, e float64) (map[string]float64, map[string]float64) {
		return map[string]float64{"pre-change stream": r}, map[string]float64{"pre-change stream": e}
	}
	for _, c := range []struct {
		after time.Duration
		ratio float64
		eta   float64
		gone  bool
		want  []string
	}{
		{0, 0.05, -1, false, []string{"pre-change stream   5%, time left not known yet"}},
		{400 * time.Millisecond, 0.2, 3.2, false, nil}, // within a second of the last line
		{time.Second, 0.4, 2.04, false, []string{"pre-change stream  40%, about 2s left"}},
		{1500 * time.Millisecond, 0.6, 1, false, nil},
		{2100 * time.Millisecond, 0.9, 0.33, false, []string{"pre-change stream  90%, about 300ms left"}},
		{2300 * time.Millisecond, 0, 0, true, []string{"pre-change stream ended"}},
		{3500 * time.Millisecond, 0, 0, true, nil},
	} {
		ratio, eta := stream(c.ratio, c.eta)
		if c.gone {
			ratio, eta = nil, nil
		}
		if got := p.at(t0.Add(c.after), ratio, eta, nil); !slices.Equal(got, c.want) {
			t.Errorf("+%s: %q, want %q", c.after, got, c.want)
		}
	}
}

// A stalled step says so, and since when (the ETA gauge alone reads -1
// for a stall as for a step whose rate is not known yet).
func TestTheTimelineSaysAStalledStepIsStalled(t *testing.T) {
	var p progressLines
	t0 := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
	ratio, eta := map[string]float64{"catch-up": 0.5}, map[string]float64{"catch-up": -1}
	got := p.at(t0.Add(20*time.Second), ratio, eta, map[string]time.Time{"catch-up": t0.Add(2 * time.Second)})
	if want := []string{"catch-up  50%, STALLED since 14:00:02Z, 18s ago"}; !slices.Equal(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
}
