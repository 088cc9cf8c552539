package bench

import (
	"strings"
	"testing"
	"time"
)

// The ratio is over the fastest bare rejoin (etcd's floor, without its own
// stall), not the median: 12 s / 1 s, not 12 s / 2 s.
func TestPrintShowsBothModesSideBySide(t *testing.T) {
	rows := []Row{{
		DBBytes: 500 << 20, Bare: []time.Duration{3 * time.Second, time.Second, 2 * time.Second}, BaselineP99: 8 * time.Millisecond,
		Modes: []string{"raft", "seed"},
		Heals: map[string]*Heals{
			"raft": {Agent: []time.Duration{12 * time.Second}, LeaderSnaps: 2, ToLearner: []float64{600 << 20, 590 << 20}, APIAttempted: 700},
			"seed": {Agent: []time.Duration{10 * time.Second}, ToLearner: []float64{300 << 10, 100 << 10, 200 << 10}, APIAttempted: 450},
		},
	}}
	var b strings.Builder
	Print(&b, rows)
	out := b.String()
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "sent to learner") {
		t.Fatalf("no header with the bytes column:\n%s", out)
	}
	for _, want := range []string{"500 MiB  raft", "590 MiB", "500 MiB  seed", "200 KiB", "0/700", "0/450", "12.00x", "10.00x", "1s  "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestMedianF(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1}, 1}} {
		if got := medianF(c.in); got != c.want {
			t.Errorf("medianF(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
