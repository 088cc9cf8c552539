package watchdog

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// A grace period's end is observed when it comes (WakeAt), not at Run's
// next poll (an hour away here): once per request.
func TestRunObservesAtTheWakeItWasAskedFor(t *testing.T) {
	w, err := New(Config{Identity: Identity{Name: "b", PeerURLs: []string{"http://127.0.0.1:1"}, ClientURL: "http://127.0.0.1:1",
		DataDir: t.TempDir()}, PollInterval: time.Hour, ProbeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.nextTick = func(time.Time) time.Duration { return time.Hour }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := make(chan time.Time, 4)
	asked := time.Time{}
	go func() {
		_ = w.Run(ctx, func(observation.Observation) {
			if asked.IsZero() {
				asked = time.Now().Add(200 * time.Millisecond)
				w.WakeAt(asked)
			}
			seen <- time.Now()
		})
	}()
	<-seen
	select {
	case at := <-seen:
		if at.Before(asked) {
			t.Fatalf("observed at %s, before the wake asked for (%s)", at, asked)
		}
	case <-ctx.Done():
		t.Fatal("no observation at the wake asked for (the next poll is an hour away)")
	}
}
