package peerseed

import "os"

// writebackEvery is how many bytes a stream writes before it asks the
// kernel to write them out (startWriteback). A stream arrives far slower
// than a disk writes (~100-250 MB/s against ~500 here), so the fsync at
// its end, a second per 500 MiB when the whole db waits in the page cache
// (the kernel's own writeback starts only after 30 s or 10 % of memory
// dirty), overlaps the stream instead.
const writebackEvery = 8 << 20

// writeback writes to f and starts the writeback of every writebackEvery
// bytes written, then waits for the range before it to be on disk. So at
// most two ranges of the stream are ever waiting for the disk: another
// process's fsync on the same disk (a member's WAL or db beside it: the
// lab's shared disk, a management node's other clusters) queues behind
// those 16 MiB, not behind a backlog as long as the stream is ahead of
// the disk. In a CI run without the wait, the leader of the cluster being
// healed stalled its applies for 2.3 s during a 726 MiB seed-mode stream
// (two files) on the shared disk (docs/recovery.md, `snapshotted`).
type writeback struct {
	f *os.File
	// prev is where the range whose writeback began last starts; started
	// where the range being written starts.
	off, prev, started int64
	sync               ranges
}

// ranges is the kernel's writeback (the real one: fileRanges).
type ranges interface {
	start(f *os.File, off, n int64)
	await(f *os.File, off, n int64)
}

func (w *writeback) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	w.off += int64(n)
	if w.off-w.started >= writebackEvery {
		s := w.sync
		if s == nil {
			s = fileRanges{}
		}
		s.start(w.f, w.started, w.off-w.started)
		if w.started > w.prev {
			s.await(w.f, w.prev, w.started-w.prev)
		}
		w.prev, w.started = w.started, w.off
	}
	return n, err
}

// fileRanges is startWriteback and awaitWriteback.
type fileRanges struct{}

func (fileRanges) start(f *os.File, off, n int64) { startWriteback(f, off, n) }
func (fileRanges) await(f *os.File, off, n int64) { awaitWriteback(f, off, n) }
