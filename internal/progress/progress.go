// Package progress estimates how far a long recovery step is and when it
// will end (docs/design.md, "Progress"): the pre-change stream and the seed
// (bytes of the source's db), the learner's catch-up (entries behind the
// leader). It is pure: the healer feeds it what is left at a time and reads
// an Estimate back for its logs, metrics, the status file and the Node.
package progress

import (
	"fmt"
	"math"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/etcd-agent/etcd-agent/internal/timefmt"
)

// Unit is what a Meter counts.
type Unit string

const (
	Bytes   Unit = "bytes"
	Entries Unit = "entries"
)

// Window is how far back the rate is measured: long enough to smooth a
// stream's bursts, short enough to follow a change of speed (a catch-up
// slowing down as the learner nears the leader).
const Window = 10 * time.Second

// maxETA bounds an ETA worth saying: beyond it (a rate near zero; also
// where a Duration would overflow) it is not known.
const maxETA = 30 * 24 * time.Hour

// sampleGap is the least time between two samples kept.
const sampleGap = 100 * time.Millisecond

// StallAfter is how long nothing may change before a step is stalled.
const StallAfter = 15 * time.Second

type sample struct {
	at   time.Time
	left int64
}

// Meter follows one step: Observe what is left, read Estimate.
type Meter struct {
	step    string
	unit    Unit
	total   int64 // 0: the first amount left
	started time.Time
	samples []sample // within Window of the newest, oldest first
	moved   time.Time
}

// NewMeter starts a meter for step at now; total is the whole amount (a
// stream's db size), or 0 when only the amount left is known (a catch-up:
// the first one observed is its total).
func NewMeter(step string, unit Unit, total int64, now time.Time) *Meter {
	return &Meter{step: step, unit: unit, total: total, started: now, moved: now}
}

// Observe records that left is still to do at now (times never go back).
func (m *Meter) Observe(now time.Time, left int64) {
	if left < 0 {
		left = 0
	}
	// Only less left is progress: a gap to the leader that grows is a
	// learner falling behind, not moving.
	if n := len(m.samples); n == 0 || left < m.samples[n-1].left {
		m.moved = now
	}
	if m.total == 0 && len(m.samples) == 0 {
		m.total = left
	}
	// Samples closer than sampleGap to the one before are merged into the
	// newest: a stream reports every chunk it reads.
	if n := len(m.samples); n >= 2 && now.Sub(m.samples[n-2].at) < sampleGap {
		m.samples[n-1] = sample{now, left}
	} else {
		m.samples = append(m.samples, sample{now, left})
	}
	cut := 0
	for cut < len(m.samples)-2 && now.Sub(m.samples[cut+1].at) >= Window {
		cut++
	}
	m.samples = m.samples[cut:]
}

// Estimate is a step's progress at a time.
type Estimate struct {
	Step  string `json:"step"`
	Unit  Unit   `json:"unit"`
	Total int64  `json:"total"`
	Left  int64  `json:"left"`
	// Rate is per second over the last Window (0: none measured yet, or
	// nothing done in it).
	Rate float64 `json:"rate"`
	// ETA is the time left at Rate (negative: unknown).
	ETA          time.Duration `json:"eta"`
	StartedAt    time.Time     `json:"startedAt"`
	At           time.Time     `json:"at"`
	StalledSince time.Time     `json:"stalledSince,omitzero"`
}

// Estimate says where the step is at now.
func (m *Meter) Estimate(now time.Time) Estimate {
	e := Estimate{Step: m.step, Unit: m.unit, Total: m.total, Left: m.total, ETA: -1, StartedAt: m.started, At: now}
	n := len(m.samples)
	if n == 0 {
		return e
	}
	first, last := m.samples[0], m.samples[n-1]
	e.Left = last.left
	if dt := last.at.Sub(first.at).Seconds(); dt > 0 && first.left > last.left {
		e.Rate = float64(first.left-last.left) / dt
		if secs := float64(last.left) / e.Rate; secs < maxETA.Seconds() {
			e.ETA = time.Duration(secs * float64(time.Second)).Round(100 * time.Millisecond)
		}
	}
	if last.left == 0 {
		e.ETA = 0
	}
	if last.left > 0 && now.Sub(m.moved) >= StallAfter {
		e.StalledSince = m.moved
	}
	return e
}

// Done is the share done, 0 to 1.
func (e Estimate) Done() float64 {
	if e.Total <= 0 {
		return 0
	}
	return math.Max(0, math.Min(1, float64(e.Total-e.Left)/float64(e.Total)))
}

// String is the estimate for a person: "stream: 412 MiB of 1.0 GiB (40%),
// 68 MiB/s, about 9s left", "catch-up: 1,234 entries behind (of 5,678),
// 500 entries/s, about 3s left"; a stalled step says since when.
func (e Estimate) String() string {
	amount := func(n int64) string {
		if e.Unit == Bytes {
			return humanize.IBytes(uint64(n))
		}
		return humanize.Comma(n) + " entries"
	}
	var s string
	if e.Unit == Bytes {
		s = fmt.Sprintf("%s: %s of %s (%.0f%%)", e.Step, amount(e.Total-e.Left), amount(e.Total), 100*e.Done())
	} else {
		s = fmt.Sprintf("%s: %s behind (of %s, %.0f%% done)", e.Step, amount(e.Left), humanize.Comma(e.Total), 100*e.Done())
	}
	switch {
	case !e.StalledSince.IsZero():
		return s + ", stalled since " + timefmt.At(e.StalledSince, e.At)
	case e.Left == 0:
		return s + ", done"
	case e.ETA < 0:
		return s + ", rate not known yet"
	}
	eta := e.ETA.Round(time.Second)
	if e.ETA < 10*time.Second {
		eta = e.ETA.Round(100 * time.Millisecond)
	}
	rate := amount(int64(e.Rate)) + "/s"
	if e.Unit != Bytes && e.Rate < 10 {
		rate = fmt.Sprintf("%.1f entries/s", e.Rate)
	}
	return s + ", " + rate + ", about " + eta.String() + " left"
}

// Summary is what a step did, once it ended: for last-recovery.
type Summary struct {
	Step string        `json:"step"`
	Unit Unit          `json:"unit"`
	Done int64         `json:"done"` // of Total
	Took time.Duration `json:"took"` // from its start to its last sample
}

// summary is m's Summary (false: nothing was measured).
func (m *Meter) summary() (Summary, bool) {
	n := len(m.samples)
	if n == 0 {
		return Summary{}, false
	}
	last := m.samples[n-1]
	return Summary{Step: m.step, Unit: m.unit, Done: max(0, m.total-last.left), Took: last.at.Sub(m.started)}, true
}

// String is "pre-change stream: 1.2 GiB in 7.5s (160 MiB/s)", "catch-up:
// 5,678 entries in 3s".
func (s Summary) String() string {
	took := s.Took.Round(100 * time.Millisecond)
	if s.Unit != Bytes {
		return fmt.Sprintf("%s: %s entries in %s", s.Step, humanize.Comma(s.Done), took)
	}
	out := fmt.Sprintf("%s: %s in %s", s.Step, humanize.IBytes(uint64(s.Done)), took)
	if s.Took > 0 {
		out += fmt.Sprintf(" (%s/s)", humanize.IBytes(uint64(float64(s.Done)/s.Took.Seconds())))
	}
	return out
}
