package watchdog

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
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

// A dedicated WAL dir removed under a running member is as urgent as its
// data dir (etcd's purge lists it every 30 s and ends the member when it
// is gone): it is observed at once, not at the next poll.
func TestRunObservesAWipedDedicatedWALDirAtOnce(t *testing.T) {
	w, walDir := walDirWatchdog(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := make(chan struct{}, 4)
	go func() { _ = w.Run(ctx, func(observation.Observation) { seen <- struct{}{} }) }()
	<-seen
	if err := os.RemoveAll(walDir); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("the WAL dir's removal was not observed within 5 s (the next poll is an hour away)")
	}
}

// Review (issue 38): every append etcd makes to its WAL in a dedicated WAL
// dir woke an observation (50 appends: 51 observations), so under write
// load the agent observed without pause. Only what changes the dir's
// entries (a segment cut, a wipe) wakes it.
func TestWALAppendsInADedicatedWALDirDoNotWakeTheWatchdog(t *testing.T) {
	w, walDir := walDirWatchdog(t)
	seg, err := os.Create(filepath.Join(walDir, "0000000000000000-0000000000000000.wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var n atomic.Int32
	seen := make(chan struct{}, 100)
	go func() { _ = w.Run(ctx, func(observation.Observation) { n.Add(1); seen <- struct{}{} }) }()
	<-seen
	for range 50 {
		if _, err := seg.Write([]byte("entry")); err != nil {
			t.Fatal(err)
		}
		if err := seg.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	// A segment cut (a new file) still wakes it: then nothing is pending.
	if err := os.WriteFile(filepath.Join(walDir, "0.tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-seen:
	case <-time.After(5 * time.Second):
		t.Fatal("a new file in the WAL dir was not observed within 5 s")
	}
	if got := n.Load(); got > 3 {
		t.Fatalf("%d observations for 50 WAL appends and one new file, want at most 3", got)
	}
}

// walDirWatchdog is a watchdog of a member with a dedicated WAL dir (made,
// empty) that polls only hourly: what wakes it is its watch.
func walDirWatchdog(t *testing.T) (*Watchdog, string) {
	t.Helper()
	root := t.TempDir()
	walDir := filepath.Join(root, "wal-disk", "wal")
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{Identity: Identity{Name: "b", PeerURLs: []string{"http://127.0.0.1:1"}, ClientURL: "http://127.0.0.1:1",
		DataDir: filepath.Join(root, "data"), WALDir: walDir}, PollInterval: time.Hour, ProbeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	w.nextTick = func(time.Time) time.Duration { return time.Hour }
	return w, walDir
}
