package peerseed

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type rangesSeen struct{ started, awaited [][2]int64 }

func (r *rangesSeen) start(_ *os.File, off, n int64) { r.started = append(r.started, [2]int64{off, n}) }
func (r *rangesSeen) await(_ *os.File, off, n int64) { r.awaited = append(r.awaited, [2]int64{off, n}) }

// TestAStreamWaitsForTheDiskTwoRangesBehind: each range's writeback is
// started as it is written, and the range before it is waited for, so no
// more than two ranges of a stream wait for the disk (a CI run's leader,
// on the same disk, stalled 2.3 s behind an unbounded backlog).
func TestAStreamWaitsForTheDiskTwoRangesBehind(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := &rangesSeen{}
	w := &writeback{f: f, sync: seen}
	chunk := make([]byte, writebackEvery/2)
	for range 7 { // 3.5 ranges
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	const r = writebackEvery
	if want := [][2]int64{{0, r}, {r, r}, {2 * r, r}}; !slices.Equal(seen.started, want) {
		t.Fatalf("writeback started for %v, want %v", seen.started, want)
	}
	if want := [][2]int64{{0, r}, {r, r}}; !slices.Equal(seen.awaited, want) {
		t.Fatalf("waited for %v, want %v (the range before each one started)", seen.awaited, want)
	}
}
