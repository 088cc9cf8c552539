package peerseed

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
)

// etcd appends the sha256 of the db to the snapshot stream. The stream's
// length tells whether the hash is there: a bbolt db is a whole number of
// pages, so a stream of n*512 + 32 bytes ends with the hash (etcdutl's
// restore uses the same rule, with 512 as the smallest sector size).
const sectorSize = 512

// trailerWriter passes every byte written to it to w, hashing it, except
// the last sha256.Size bytes seen so far, which it holds back: until the
// stream ends any of them may belong to the trailing hash. This lets the db
// be checked and stored in one pass, without reading the file back.
type trailerWriter struct {
	w     io.Writer
	h     hash.Hash
	tail  [sha256.Size]byte
	nTail int
	n     int64 // bytes passed on to w
}

func newTrailerWriter(w io.Writer) *trailerWriter {
	return &trailerWriter{w: w, h: sha256.New()}
}

func (t *trailerWriter) Write(p []byte) (int, error) {
	written := len(p)
	// release is how many of the held and new bytes are now known to be db
	// bytes: all but the last sha256.Size of them.
	release := t.nTail + len(p) - sha256.Size
	if release > 0 {
		fromTail := min(release, t.nTail)
		if fromTail > 0 {
			if err := t.pass(t.tail[:fromTail]); err != nil {
				return 0, err
			}
			t.nTail = copy(t.tail[:], t.tail[fromTail:t.nTail])
		}
		if fromP := release - fromTail; fromP > 0 {
			if err := t.pass(p[:fromP]); err != nil {
				return 0, err
			}
			p = p[fromP:]
		}
	}
	t.nTail += copy(t.tail[t.nTail:], p)
	return written, nil
}

func (t *trailerWriter) pass(b []byte) error {
	t.h.Write(b)
	if _, err := t.w.Write(b); err != nil {
		return err
	}
	t.n += int64(len(b))
	return nil
}

// verify checks, once the stream has ended, that it carried a db followed
// by that db's sha256. It returns the db's hash.
func (t *trailerWriter) verify() ([]byte, error) {
	total := t.n + int64(t.nTail)
	switch {
	case t.nTail < sha256.Size || t.n == 0:
		return nil, fmt.Errorf("%w: the stream ended after %d bytes, too short for a db and its hash", ErrTruncated, total)
	case total%sectorSize == 0:
		return nil, fmt.Errorf("%w (%d bytes, a multiple of %d)", ErrNoHash, total, sectorSize)
	case total%sectorSize != sha256.Size:
		return nil, fmt.Errorf("%w: %d bytes is neither whole %d-byte sectors nor sectors plus a sha256", ErrTruncated, total, sectorSize)
	}
	sum := t.h.Sum(nil)
	if string(sum) != string(t.tail[:]) {
		return nil, fmt.Errorf("%w: the db's %d bytes hash to %x, the stream says %x", ErrHashMismatch, t.n, sum, t.tail[:])
	}
	return sum, nil
}
