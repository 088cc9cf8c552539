package peerseed

// A second copy of the db written during the stream: seed mode builds the
// learner's data dir from the pre-change backup, and moving a copy written
// beside it saves writing the whole db again after the add (issue 17). The
// copy is best effort: it never fails the stream, and it is dropped (its
// part file removed) on its first write error or when the stream fails.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
)

// StreamOption adjusts Stream.
type StreamOption func(*streamOptions)

type streamOptions struct {
	copyTo string
}

// AlsoCopyTo asks Stream to write a second copy of the db to path (written
// as path+".part", renamed once the stream is verified; not fsynced). It is
// skipped when path exists or its filesystem lacks room for both copies.
func AlsoCopyTo(path string) StreamOption {
	return func(o *streamOptions) { o.copyTo = path }
}

// streamCopy is the copy's state; a nil *streamCopy does nothing.
type streamCopy struct {
	path string
	f    *os.File
	bw   *bufio.Writer
	err  error
	ok   bool
}

// copyFor opens the copy's part file, when asked and there is room for it
// beside the stream's own (needBytes each).
func (o streamOptions) copyFor(needBytes uint64) *streamCopy {
	if o.copyTo == "" {
		return nil
	}
	c := &streamCopy{path: o.copyTo}
	if _, err := os.Lstat(c.path); err == nil || !errors.Is(err, os.ErrNotExist) {
		c.err = fmt.Errorf("%s exists or cannot be checked (%v); no copy", c.path, err)
		return c
	}
	need := 2 * needBytes // counted as on the stream's filesystem: the stricter check
	if needBytes > math.MaxUint64/2 {
		need = math.MaxUint64
	}
	if free, err := localdisk.FreeBytes(filepath.Dir(c.path)); err != nil || free < need {
		c.err = fmt.Errorf("%w: %d bytes free for the copy, %d needed (%v)", ErrDiskFull, free, need, err)
		return c
	}
	f, err := os.OpenFile(c.path+".part", os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		c.err = err
		return c
	}
	c.f, c.bw = f, bufio.NewWriterSize(&writeback{f: f}, writeBuffer)
	return c
}

// beside returns w, also writing to the copy while it lasts.
func (c *streamCopy) beside(w io.Writer) io.Writer {
	if c == nil || c.f == nil {
		return w
	}
	return writerPair{w: w, c: c}
}

type writerPair struct {
	w io.Writer
	c *streamCopy
}

func (p writerPair) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if err == nil && p.c.f != nil {
		if _, cerr := p.c.bw.Write(b); cerr != nil {
			p.c.drop(cerr)
		}
	}
	return n, err
}

// finish flushes, closes and renames the copy after a verified stream.
func (c *streamCopy) finish() {
	if c == nil || c.f == nil {
		return
	}
	err := c.bw.Flush()
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	c.f = nil
	if err == nil {
		err = os.Rename(c.path+".part", c.path)
	}
	if err != nil {
		c.err = err
		os.Remove(c.path + ".part")
		return
	}
	c.ok = true
}

// drop abandons the copy (its part file removed), keeping the first error.
func (c *streamCopy) drop(err error) {
	if c == nil {
		return
	}
	if c.f != nil {
		c.f.Close()
		c.f = nil
		os.Remove(c.path + ".part")
	}
	if c.ok { // the stream failed after the copy was renamed
		os.Remove(c.path)
		c.ok = false
	}
	if c.err == nil {
		c.err = err
	}
}

// done is the copy's path once written, else "".
func (c *streamCopy) done() string {
	if c == nil || !c.ok {
		return ""
	}
	return c.path
}

// error says why there is no copy (nil when asked for none, or written).
func (c *streamCopy) error() error {
	if c == nil {
		return nil
	}
	return c.err
}
