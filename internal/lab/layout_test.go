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

// A restore puts the copy in place in one step and keeps the replaced
// data dir aside: at no moment is the data dir missing or half copied.
func TestARestoreSwapsTheDataDirInOneStep(t *testing.T) {
	root := t.TempDir()
	src, dir, aside := filepath.Join(root, "backup"), filepath.Join(root, "data"), filepath.Join(root, "aside")
	for d, content := range map[string]string{src: "old", dir: "current"} {
		if err := os.MkdirAll(filepath.Join(d, "member"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "member", "f"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := restoreInPlace(src, dir, aside); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]string{dir: "old", aside: "current", src: "old"} {
		if b, err := os.ReadFile(filepath.Join(d, "member", "f")); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", d, b, err, want)
		}
	}
	if _, err := os.Stat(dir + ".restoring"); !os.IsNotExist(err) {
		t.Errorf("the temporary copy is left: %v", err)
	}
}
