package peerseed

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A snapshot streamed with a copy for the seed: the copy is the db, byte
// for byte; it never fails the stream; and a stream that fails leaves no
// copy either.
func TestTheStreamsCopyIsTheDbAndNeverFailsTheStream(t *testing.T) {
	endpoint, _ := followerEndpoint(t)
	raw := rawSnapshot(t, endpoint)
	db := raw[:len(raw)-sha256.Size]

	t.Run("written", func(t *testing.T) {
		dir := t.TempDir()
		dest, cp := filepath.Join(dir, "snapshot.db"), filepath.Join(dir, "seed.db")
		c := AlsoCopyTo(cp)
		var o streamOptions
		c(&o)
		sc := o.copyFor(1 << 20)
		if _, _, err := streamToFile(ctxWithTimeout(t, time.Minute), bytes.NewReader(raw), dest, nil, sc); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(sc.done())
		if err != nil || !bytes.Equal(got, db) {
			t.Fatalf("copy %q (%v): %d bytes, equal to the db: %v", sc.done(), err, len(got), bytes.Equal(got, db))
		}
	})
	t.Run("a copy that cannot be written does not fail the stream", func(t *testing.T) {
		dir := t.TempDir()
		dest, cp := filepath.Join(dir, "snapshot.db"), filepath.Join(dir, "seed.db")
		o := streamOptions{copyTo: cp}
		sc := o.copyFor(1 << 20)
		sc.f.Close() // every write to the copy fails
		size, _, err := streamToFile(ctxWithTimeout(t, time.Minute), bytes.NewReader(raw), dest, nil, sc)
		if err != nil || size != int64(len(db)) {
			t.Fatalf("stream: %d bytes, %v; want the whole db and no error", size, err)
		}
		if sc.done() != "" || sc.error() == nil {
			t.Errorf("copy %q, error %v: want none, and why", sc.done(), sc.error())
		}
		mustNotExist(t, cp, cp+".part")
	})
	t.Run("a copy whose write fails mid-stream does not fail the stream", func(t *testing.T) {
		// Larger than the copy's buffer: its writes fail while the stream
		// goes on (above, the only write is the flush at the end).
		big := make([]byte, 3*writeBuffer+7*sectorSize)
		for i := range big {
			big[i] = byte(i * 7)
		}
		sum := sha256.Sum256(big)
		dir := t.TempDir()
		dest, cp := filepath.Join(dir, "snapshot.db"), filepath.Join(dir, "seed.db")
		sc := streamOptions{copyTo: cp}.copyFor(1 << 20)
		sc.f.Close() // every write to the copy fails
		size, _, err := streamToFile(ctxWithTimeout(t, time.Minute), bytes.NewReader(append(big, sum[:]...)), dest, nil, sc)
		if err != nil || size != int64(len(big)) {
			t.Fatalf("stream: %d bytes, %v; want the whole db and no error", size, err)
		}
		if got, err := os.ReadFile(dest); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("the stream's file (%v) is not the db", err)
		}
		if sc.done() != "" || sc.error() == nil {
			t.Errorf("copy %q, error %v: want none, and why", sc.done(), sc.error())
		}
		mustNotExist(t, cp, cp+".part")
	})
	t.Run("a stream that fails leaves no copy", func(t *testing.T) {
		dir := t.TempDir()
		dest, cp := filepath.Join(dir, "snapshot.db"), filepath.Join(dir, "seed.db")
		flipped := bytes.Clone(raw)
		flipped[len(raw)/2] ^= 0x04
		sc := streamOptions{copyTo: cp}.copyFor(1 << 20)
		if _, _, err := streamToFile(ctxWithTimeout(t, time.Minute), bytes.NewReader(flipped), dest, nil, sc); !errors.Is(err, ErrHashMismatch) {
			t.Fatalf("got %v, want %v", err, ErrHashMismatch)
		}
		if sc.done() != "" {
			t.Errorf("copy %q of a stream that failed its hash", sc.done())
		}
		mustNotExist(t, cp, cp+".part", dest)
	})
	t.Run("no room for two copies: none", func(t *testing.T) {
		dir := t.TempDir()
		sc := streamOptions{copyTo: filepath.Join(dir, "seed.db")}.copyFor(1 << 61)
		if sc.f != nil || !errors.Is(sc.error(), ErrDiskFull) {
			t.Fatalf("copy opened %v, error %v: want none, ErrDiskFull", sc.f != nil, sc.error())
		}
	})
}

func mustNotExist(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists (%v)", p, err)
		}
	}
}

// Two streams never share a part file: one whose name is taken by a stream
// still writing (a cancelled one that has not ended) fails, and leaves the
// other's part file as it was; the same for the seed's copy.
func TestAStreamNeverWritesIntoAnotherStreamsPartFile(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "snapshot.db")
	if err := os.WriteFile(dest+".part", []byte("the other stream's bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := streamToFile(ctxWithTimeout(t, time.Minute), bytes.NewReader(make([]byte, 512+sha256.Size)), dest, nil, nil); !errors.Is(err, os.ErrExist) {
		t.Fatalf("got %v, want the part file refused as taken", err)
	}
	if b, err := os.ReadFile(dest + ".part"); err != nil || string(b) != "the other stream's bytes" {
		t.Fatalf("the other stream's part file: %q, %v", b, err)
	}
	cp := filepath.Join(dir, "seed.db")
	if err := os.WriteFile(cp+".part", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if sc := (streamOptions{copyTo: cp}).copyFor(1 << 20); sc.f != nil || sc.error() == nil {
		t.Fatalf("copy opened over another's part file (error %v)", sc.error())
	}
}
