package lab

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// The lab's wipes race the agent restoring an empty skeleton into a wiped
// serving member's data dir (docs/design.md §4, plan.DecideSkeleton): seen
// in CI as "unlinkat .../member: directory not empty". A wipe must outlast
// such a writer for as long as it keeps putting the skeleton back briefly.
func TestAWipeOutlastsTheAgentPuttingTheSkeletonBack(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(data, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := os.WriteFile(filepath.Join(data, "member", "snap", "f"+string(rune('a'+i%26))+string(rune('a'+i/26))), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the agent: puts member/snap back whenever it finds it gone
		defer wg.Done()
		deadline := time.After(100 * time.Millisecond)
		for {
			select {
			case <-stop:
				return
			case <-deadline:
				return
			default:
				_ = os.MkdirAll(filepath.Join(data, "member", "wal"), 0o700)
			}
		}
	}()
	err := removeAllRacing(data)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("wipe failed against a writer that stops within 100ms: %v", err)
	}
}
