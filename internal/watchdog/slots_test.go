package watchdog

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Many members' watchdogs sharing Slots are observed at most cap(Slots) at
// a time (the agent's bounded probe pool on a management node).
func TestSharedSlotsBoundConcurrentObservations(t *testing.T) {
	slots := make(chan struct{}, 2)
	var running, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		w, err := New(Config{Identity: Identity{Name: "m", ClientURL: "http://127.0.0.1:1", PeerURLs: []string{"http://127.0.0.1:2"}, DataDir: t.TempDir()},
			PollInterval: time.Second, ProbeTimeout: 200 * time.Millisecond, Slots: slots})
		if err != nil {
			t.Fatal(err)
		}
		w.observeHook = func() {
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(50 * time.Millisecond) // holding its slot
			running.Add(-1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close()
			w.Observe(context.Background(), time.Now())
		}()
		_ = i
	}
	wg.Wait()
	if p := peak.Load(); p > 2 || p == 0 {
		t.Fatalf("peak concurrent observations %d, want 1..2", p)
	}
}

// Run's polls fall on wall-clock multiples of the interval, whenever it
// started: every member of an agent is polled at one instant.
func TestPollsFallOnWallClockMultiples(t *testing.T) {
	every := 5 * time.Second
	w, err := New(Config{Identity: Identity{Name: "m1", PeerURLs: []string{"http://127.0.0.1:1"}, DataDir: t.TempDir()}, PollInterval: every})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	base := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		after time.Duration
		want  time.Duration
	}{
		{0, every}, // on a multiple: the next one, never now
		{time.Nanosecond, every - time.Nanosecond},
		{1300 * time.Millisecond, 3700 * time.Millisecond},
		{every - time.Nanosecond, time.Nanosecond},
		{every, every},
	} {
		if got := w.untilPoll(base.Add(c.after)); got != c.want {
			t.Errorf("%s after a multiple: next poll in %s, want %s", c.after, got, c.want)
		}
	}
}
