package progress

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 6, 19, 30, 0, 0, time.UTC)

func TestAStreamAtASteadyRateEndsWhenItsETASays(t *testing.T) {
	const total = 1 << 30
	m := NewMeter("stream", Bytes, total, t0)
	// 64 MiB/s, observed every second.
	for s := 0; s <= 6; s++ {
		m.Observe(t0.Add(time.Duration(s)*time.Second), total-int64(s)*64<<20)
	}
	e := m.Estimate(t0.Add(6 * time.Second))
	if want := 10 * time.Second; e.ETA != want { // 640 MiB left at 64 MiB/s
		t.Fatalf("ETA %s, want %s (%+v)", e.ETA, want, e)
	}
	if got, want := e.String(), "stream: 384 MiB of 1.0 GiB (38%), 64 MiB/s, about 10s left"; got != want {
		t.Fatalf("String %q, want %q", got, want)
	}
}

func TestTheRateFollowsTheLastWindowOnly(t *testing.T) {
	m := NewMeter("stream", Bytes, 1000<<20, t0)
	left := int64(1000 << 20)
	// 20 s at 10 MiB/s, then 10 s at 40 MiB/s: the rate is the new one.
	for s := 1; s <= 30; s++ {
		if s <= 20 {
			left -= 10 << 20
		} else {
			left -= 40 << 20
		}
		m.Observe(t0.Add(time.Duration(s)*time.Second), left)
	}
	e := m.Estimate(t0.Add(30 * time.Second))
	if e.Rate != 40<<20 {
		t.Fatalf("rate %.0f B/s, want the last window's %d", e.Rate, 40<<20)
	}
	if e.ETA != 10*time.Second { // 400 MiB left
		t.Fatalf("ETA %s, want 10s", e.ETA)
	}
}

func TestACatchUpCountsTheGapThatCloses(t *testing.T) {
	m := NewMeter("catch-up", Entries, 0, t0)
	// The leader keeps writing: the gap closes by 500 entries a second.
	for s, gap := range []int64{6000, 5500, 5000, 4500} {
		m.Observe(t0.Add(time.Duration(s)*time.Second), gap)
	}
	e := m.Estimate(t0.Add(3 * time.Second))
	if e.Total != 6000 || e.Left != 4500 || e.ETA != 9*time.Second {
		t.Fatalf("estimate %+v, want 4,500 of 6,000 left, 9s", e)
	}
	if got, want := e.String(), "catch-up: 4,500 entries behind (of 6,000, 25% done), 500 entries/s, about 9s left"; got != want {
		t.Fatalf("String %q, want %q", got, want)
	}
}

func TestAStepThatStopsMovingSaysItIsStalledAndSinceWhen(t *testing.T) {
	m := NewMeter("stream", Bytes, 100<<20, t0)
	m.Observe(t0, 100<<20)
	m.Observe(t0.Add(time.Second), 90<<20)
	for s := 2; s <= 20; s++ {
		m.Observe(t0.Add(time.Duration(s)*time.Second), 90<<20)
	}
	if e := m.Estimate(t0.Add(15 * time.Second)); !e.StalledSince.IsZero() {
		t.Fatalf("stalled after 14s without progress: %+v (StallAfter %s)", e, StallAfter)
	}
	e := m.Estimate(t0.Add(20 * time.Second))
	if !e.StalledSince.Equal(t0.Add(time.Second)) {
		t.Fatalf("stalled since %s, want %s", e.StalledSince, t0.Add(time.Second))
	}
	if s := e.String(); !strings.HasSuffix(s, "stalled since 2026-12-06T19:30:01Z, 19s ago") {
		t.Fatalf("String %q: want it to say since when it is stalled", s)
	}
}

func TestNoRateNoETA(t *testing.T) {
	m := NewMeter("stream", Bytes, 100<<20, t0)
	if e := m.Estimate(t0); e.ETA >= 0 || !strings.HasSuffix(e.String(), "rate not known yet") {
		t.Fatalf("no sample: %+v %q", e, e.String())
	}
	m.Observe(t0, 100<<20)
	m.Observe(t0.Add(time.Second), 0)
	if e := m.Estimate(t0.Add(time.Second)); e.ETA != 0 || e.Done() != 1 || !strings.HasSuffix(e.String(), "done") {
		t.Fatalf("all done: %+v %q", e, e.String())
	}
}

func TestABoardTellsTheRunningStepsOldestFirst(t *testing.T) {
	var b Board
	b.Start("pre-change stream", Bytes, 100, t0)
	b.Start("catch-up", Entries, 0, t0.Add(time.Second))
	if _, ok := b.Observe("seed stream", t0, 1); ok {
		t.Fatal("a step not started took an observation")
	}
	b.Observe("catch-up", t0.Add(2*time.Second), 50)
	es := b.Estimates(t0.Add(2 * time.Second))
	if len(es) != 2 || es[0].Step != "pre-change stream" || es[1].Step != "catch-up" || es[1].Left != 50 {
		t.Fatalf("estimates %+v", es)
	}
	b.Stop("pre-change stream")
	if b.Running("pre-change stream") || !b.Running("catch-up") {
		t.Fatal("Stop ended the wrong step")
	}
	var none *Board
	none.Start("x", Bytes, 1, t0)
	if none.Estimates(t0) != nil || none.Running("x") {
		t.Fatal("a nil board told something")
	}
}

func TestSamplesCloserThanTheGapAreMergedIntoTheNewest(t *testing.T) {
	m := NewMeter("stream", Bytes, 1<<30, t0)
	for i := 0; i < 100000; i++ { // a chunk every 100µs for 10 s
		m.Observe(t0.Add(time.Duration(i)*100*time.Microsecond), 1<<30-int64(i)*4096)
	}
	if n := len(m.samples); n > int(Window/sampleGap)+2 {
		t.Fatalf("%d samples kept over 10 s of chunks; want at most one per %s", n, sampleGap)
	}
	e := m.Estimate(t0.Add(10 * time.Second))
	if e.Left != 1<<30-99999*4096 {
		t.Fatalf("left %d: the newest chunk is not counted", e.Left)
	}
}

func TestAStoppedStepLeavesWhatItDidForLastRecovery(t *testing.T) {
	var b Board
	b.Start("pre-change stream", Bytes, 1200<<20, t0)
	b.Observe("pre-change stream", t0.Add(time.Second), 1000<<20)
	b.Observe("pre-change stream", t0.Add(7500*time.Millisecond), 0)
	b.Start("catch-up", Entries, 0, t0.Add(8*time.Second))
	b.Stop("pre-change stream")
	b.Stop("catch-up") // nothing measured: nothing to say
	got := b.TakeFinished()
	if len(got) != 1 || got[0].String() != "pre-change stream: 1.2 GiB in 7.5s (160 MiB/s)" {
		t.Fatalf("finished %v", got)
	}
	if again := b.TakeFinished(); len(again) != 0 {
		t.Fatalf("taken twice: %v", again)
	}
}

// Review findings: a gap that grows is no progress (a learner applying
// nothing while the leader writes is stalled); a rate so slow its ETA
// overflows is not known; entries under 1/s are not "0 entries/s".
func TestOnlyLessLeftIsProgressAndAHopelessRateHasNoETA(t *testing.T) {
	m := NewMeter("catch-up", Entries, 0, t0)
	for s := 0; s <= 20; s++ {
		m.Observe(t0.Add(time.Duration(s)*time.Second), int64(1000+10*s)) // the gap only grows
	}
	if e := m.Estimate(t0.Add(20 * time.Second)); e.StalledSince.IsZero() {
		t.Fatalf("a gap that grew for 20 s is not stalled: %+v", e)
	}
	b := NewMeter("stream", Bytes, 8<<30, t0)
	b.Observe(t0, 8<<30)
	b.Observe(t0.Add(10*time.Second), 8<<30-1)
	if e := b.Estimate(t0.Add(10 * time.Second)); e.ETA >= 0 && e.ETA < time.Second {
		t.Fatalf("1 byte in 10 s of 8 GiB: ETA %s; want unknown (-1) or huge", e.ETA)
	}
	c := NewMeter("catch-up", Entries, 0, t0)
	c.Observe(t0, 10)
	c.Observe(t0.Add(4*time.Second), 8)
	if s := c.Estimate(t0.Add(4 * time.Second)).String(); !strings.Contains(s, "0.5 entries/s") {
		t.Fatalf("String %q: want the rate of 0.5 entries/s", s)
	}
}
