package localdisk

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The deep check never waits without a deadline (seen in CI, e2e
// TestAClusterOnMixedDataDirLayouts: node2's agent wrote no line for two
// minutes, stuck in one observation until it was shut down).

// bbolt panics in Begin when both meta pages go bad under a db it has open
// (a db damaged while the inspection child reads it: the e2e corrupts the
// db of a member that just stopped), and its locks stay held: the child's
// deferred db.Close waited on them forever, and the child hung instead of
// crashing. It must crash (a verdict: corrupt) at once.
func TestInspectionCrashesInsteadOfHangingWhenTheMetaPagesGoBadUnderItsOpenDB(t *testing.T) {
	m := copyOfGolden(t)
	dbPath := filepath.Join(m.dataDir, dbRelPath)
	pageSize := dbPageSize(t, dbPath)
	ended := make(chan any, 1)
	go func() {
		defer func() { ended <- recover() }()
		inspect(inspectRequest{DataDir: m.dataDir, LockTimeout: dbLockTimeout}, func(step string, _ Result) {
			if strings.HasPrefix(step, "check ") { // the db is open: as the corruption lands mid-inspection
				garble(t, dbPath, 0, 2*pageSize)
			}
		})
	}()
	select {
	case p := <-ended:
		if p == nil {
			t.Fatal("inspect returned a verdict on a db whose meta pages went bad under it; want bbolt's panic to crash the child")
		}
		t.Logf("inspect panicked (the child crashes: a corrupt verdict): %v", p)
	case <-time.After(10 * time.Second):
		t.Fatal("inspect hung after bbolt's panic on meta pages gone bad under the open db (db.Close waits on the locks Begin left held)")
	}
}

// A child that never finishes (here: a .snap file that is a FIFO nobody
// writes, as a read from a hung disk) is killed at the inspection's own
// deadline, also when the caller's ctx has none (the agent's loop): the
// verdict is the layout's, unverified, saying why.
func TestClassifyEndsAHungInspectionWhenTheCallerGivesNoDeadline(t *testing.T) {
	defer func(d time.Duration) { inspectTimeout = d }(inspectTimeout)
	inspectTimeout = time.Second
	m := copyOfGolden(t)
	fifo := filepath.Join(m.dataDir, snapRelPath, "0000000000000009-00000000000fffff.snap")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // a child still blocked on the FIFO's open is let go
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	done := make(chan Result, 1)
	start := time.Now()
	go func() { done <- Classify(context.Background(), DataDirOnly(m.dataDir), Expect{}) }()
	select {
	case r := <-done:
		t.Logf("returned after %s", time.Since(start).Round(time.Millisecond))
		requireClass(t, r, ClassOK, "deep check not finished", "did not finish within 1s")
		if r.Verified {
			t.Fatal("a check killed at its deadline is verified")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Classify with a context without deadline waited on a hung inspection child past 15s")
	}
}
