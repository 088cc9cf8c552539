package peerseed

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"testing"
)

// snapshotStream builds what etcd sends: a db of dbSize bytes and its sha256.
func snapshotStream(dbSize int) (db, stream []byte) {
	db = make([]byte, dbSize)
	rng := rand.New(rand.NewPCG(1, uint64(dbSize)))
	for i := range db {
		db[i] = byte(rng.Uint32())
	}
	sum := sha256.Sum256(db)
	return db, append(append([]byte{}, db...), sum[:]...)
}

// writeInChunks feeds stream to w in random-sized writes, including empty
// and tiny ones that straddle the held-back tail.
func writeInChunks(t *testing.T, w *trailerWriter, stream []byte, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	for len(stream) > 0 {
		n := min(len(stream), rng.IntN(100))
		if _, err := w.Write(stream[:n]); err != nil {
			t.Fatal(err)
		}
		stream = stream[n:]
	}
}

func TestTrailerWriterPassesTheDBAndKeepsTheHashWhateverTheChunking(t *testing.T) {
	for _, size := range []int{512, 4096, 3 * 4096} {
		db, stream := snapshotStream(size)
		for seed := range uint64(20) {
			var out bytes.Buffer
			w := newTrailerWriter(&out)
			writeInChunks(t, w, stream, seed)
			sum, err := w.verify()
			if err != nil {
				t.Fatalf("size %d seed %d: %v", size, seed, err)
			}
			if !bytes.Equal(out.Bytes(), db) {
				t.Fatalf("size %d seed %d: passed %d bytes, want exactly the %d db bytes", size, seed, out.Len(), len(db))
			}
			if want := sha256.Sum256(db); !bytes.Equal(sum, want[:]) {
				t.Fatalf("size %d seed %d: sum %x, want %x", size, seed, sum, want)
			}
		}
	}
}

func TestTrailerWriterRefusals(t *testing.T) {
	_, good := snapshotStream(4096)
	flipped := append([]byte{}, good...)
	flipped[100] ^= 0x01
	badHash := append([]byte{}, good...)
	badHash[len(badHash)-1] ^= 0x80
	tests := []struct {
		name   string
		stream []byte
		want   error
	}{
		{"one flipped db byte", flipped, ErrHashMismatch},
		{"one flipped hash byte", badHash, ErrHashMismatch},
		{"cut in the middle", good[:len(good)-1000], ErrTruncated},
		{"cut inside the hash", good[:len(good)-5], ErrTruncated},
		{"db without hash", good[:len(good)-32], ErrNoHash},
		{"shorter than a hash", good[:20], ErrTruncated},
		{"only a hash", good[len(good)-32:], ErrTruncated},
		{"empty", nil, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTrailerWriter(&bytes.Buffer{})
			writeInChunks(t, w, tt.stream, 7)
			if _, err := w.verify(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}
