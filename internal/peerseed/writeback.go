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
// bytes written.
type writeback struct {
	f            *os.File
	off, started int64
}

func (w *writeback) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	w.off += int64(n)
	if w.off-w.started >= writebackEvery {
		startWriteback(w.f, w.started, w.off-w.started)
		w.started = w.off
	}
	return n, err
}
