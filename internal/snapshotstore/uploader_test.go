package snapshotstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// The uploader uploads in the background, says how it went, drops (and
// says so) what does not fit its queue, and a store that cannot be opened
// neither blocks anyone nor keeps it from stopping.
func TestUploaderUploadsInTheBackgroundAndNeverBlocks(t *testing.T) {
	root := t.TempDir()
	u := NewUploader("file://"+root, 2, zap.NewNop())
	var mu sync.Mutex
	results := map[string]int{}
	count := func(r string) { mu.Lock(); results[r]++; mu.Unlock() }
	p, m := snapshotFile(t, t.TempDir(), 10_000, time.Now())
	for range uploadQueue + 3 { // before Run: the queue fills, the rest is dropped at once
		u.Enqueue(m, p, count)
	}
	mu.Lock()
	if results[Dropped] != 3 {
		t.Fatalf("dropped %d, want 3", results[Dropped])
	}
	mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	go u.Run(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := results[Uploaded] + results[Failed]
		mu.Unlock()
		if n == uploadQueue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("results %v after 30s", results)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-u.Done()
	s, _ := Open(context.Background(), "file://"+root)
	defer s.Close()
	objs, _, err := s.List(context.Background(), m.ClusterID)
	if err != nil || len(objs) != 1 || results[Uploaded] == 0 {
		// One key: the same snapshot (same time) each time; kept.
		t.Fatalf("store holds %+v (%v), results %v", objs, err, results)
	}

	// A store that does not exist: Enqueue still returns at once, Run
	// retries (logged) and stops when asked.
	gone := NewUploader("file:///does/not/exist", 2, zap.NewNop())
	ctx2, cancel2 := context.WithCancel(context.Background())
	go gone.Run(ctx2)
	if !gone.Enqueue(m, p, nil) {
		t.Fatal("enqueue refused")
	}
	cancel2()
	select {
	case <-gone.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("an uploader whose store never opened did not stop")
	}
}

func TestBoundedStopsWaitingForACallThatIgnoresItsContext(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	err := bounded(context.Background(), 100*time.Millisecond, func(context.Context) error { <-release; return nil })
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("bounded returned %v after %s", err, time.Since(start))
	}
}
