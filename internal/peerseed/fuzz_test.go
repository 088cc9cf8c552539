package peerseed

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/storage/schema"
)

// A snapshot stream comes from another member (etcd's Snapshot RPC): the
// db and its sha256 trailer. Its provenance record (<db>.seed.json) is read
// back from disk. Seeds are streams as etcd sends them and the shapes this
// package's tests use.

// trailerVerdict is what a stream of total bytes ending in tail deserves,
// stated apart from trailerWriter: etcdutl's rule (n*512 + 32 bytes carry
// a hash), the db at least one byte.
func trailerVerdict(stream []byte) error {
	total := len(stream)
	switch {
	case total <= sha256.Size:
		return ErrTruncated
	case total%sectorSize == 0:
		return ErrNoHash
	case total%sectorSize != sha256.Size:
		return ErrTruncated
	}
	sum := sha256.Sum256(stream[:total-sha256.Size])
	if !bytes.Equal(sum[:], stream[total-sha256.Size:]) {
		return ErrHashMismatch
	}
	return nil
}

// FuzzTrailerWriter: whatever the stream and however it is cut into
// writes, trailerWriter passes on exactly all but its last 32 bytes, and
// its verdict is etcd's rule: a whole number of sectors plus the sha256
// of what came before, which it returns. mode 1 makes a valid stream of
// data (padded to whole sectors, its hash appended), mode 2 the same with
// one bit of it flipped at flip.
func FuzzTrailerWriter(f *testing.F) {
	_, stream := snapshotStream(4096)
	f.Add(stream, []byte{99, 1, 0, 31, 32, 33}, uint8(0), uint16(0))
	f.Add(stream[:len(stream)-1000], []byte{7}, uint8(0), uint16(0))
	f.Add(stream[:len(stream)-32], []byte{}, uint8(0), uint16(0))
	f.Add(stream[len(stream)-32:], []byte{5, 0}, uint8(0), uint16(0))
	f.Add([]byte("a member's db"), []byte{3, 200}, uint8(1), uint16(0))
	f.Add([]byte("a member's db"), []byte{3, 200}, uint8(2), uint16(4100))
	f.Add([]byte{}, []byte{}, uint8(1), uint16(0))
	f.Fuzz(func(t *testing.T, data, cuts []byte, mode uint8, flip uint16) {
		stream := data
		if mode%3 != 0 {
			db := make([]byte, max(sectorSize, (len(data)+sectorSize-1)/sectorSize*sectorSize))
			copy(db, data)
			sum := sha256.Sum256(db)
			stream = append(db, sum[:]...)
			if mode%3 == 2 {
				i := int(flip) % len(stream)
				stream[i] ^= 1 << (flip % 8)
			}
		}
		var out bytes.Buffer
		w := newTrailerWriter(&out)
		rest := stream
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(n, int(cuts[i%len(cuts)]))
			}
			if i > 4*len(stream)+8 { // all-zero cuts: finish in one write
				n = len(rest)
			}
			if got, err := w.Write(rest[:n]); err != nil || got != n {
				t.Fatalf("Write(%d bytes) = %d, %v", n, got, err)
			}
			rest = rest[n:]
		}
		if want := stream[:max(0, len(stream)-sha256.Size)]; !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("passed %d bytes, want the %d before the trailer", out.Len(), len(want))
		}
		sum, err := w.verify()
		want := trailerVerdict(stream)
		switch {
		case want == nil && err != nil:
			t.Fatalf("a valid %d-byte stream refused: %v", len(stream), err)
		case want != nil && !errors.Is(err, want):
			t.Fatalf("%d-byte stream: %v, want %v", len(stream), err, want)
		case want == nil && !bytes.Equal(sum, stream[len(stream)-sha256.Size:]):
			t.Fatalf("verify returned %x, the trailer is %x", sum, stream[len(stream)-sha256.Size:])
		case want != nil && sum != nil:
			t.Fatalf("a refused stream returned a hash %x", sum)
		}
	})
}

// FuzzReadSeedSource: an accepted provenance record is complete (cluster
// ID, size, sha256) and writes back as the same record; a refused one
// yields nothing. SeedSource's UnmarshalJSON leaves its value as it was
// when it fails.
func FuzzReadSeedSource(f *testing.F) {
	in := SeedSource{ClusterID: 0xfedcba9876543210, SourceID: 0x8e9e05c52164694d, LeaderID: 1, Endpoint: "https://10.0.0.1:2379",
		LeaderIndex: 120, SourceApplied: 121, Size: 20480, SHA256: "ab", Version: "3.6.4", StreamedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	b, _ := json.MarshalIndent(in, "", "  ")
	f.Add(b)
	f.Add([]byte(`{"clusterID":"1","size":1,"sha256":"x"}`))
	f.Add([]byte(`{"clusterID":"0","size":1,"sha256":"x"}`))
	f.Add([]byte(`{"clusterID":"1","size":0,"sha256":"x","streamedAt":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sentinel := SeedSource{Endpoint: "before", ClusterID: 7}
		s := sentinel
		if err := s.UnmarshalJSON(b); err != nil && s != sentinel {
			t.Fatalf("UnmarshalJSON(%q) failed (%v) but changed the value to %+v", b, err, s)
		}

		dir := t.TempDir()
		db := filepath.Join(dir, "db")
		if err := os.WriteFile(SeedSourcePath(db), b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadSeedSource(db)
		if err != nil {
			if !errors.Is(err, ErrSeedNoProvenance) || got != (SeedSource{}) {
				t.Fatalf("ReadSeedSource(%q) = %+v, %v", b, got, err)
			}
			return
		}
		if got.ClusterID == 0 || got.Size <= 0 || got.SHA256 == "" {
			t.Fatalf("accepted an incomplete record %q: %+v", b, got)
		}
		want, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("accepted %+v, cannot write it: %v", got, err)
		}
		// What writeSeedSource writes (its fsyncs would slow the fuzzer).
		again := filepath.Join(dir, "again")
		if err := os.WriteFile(SeedSourcePath(again), want, 0o600); err != nil {
			t.Fatal(err)
		}
		got2, err := ReadSeedSource(again)
		out, _ := json.Marshal(got2)
		if err != nil || string(out) != string(want) {
			t.Fatalf("round trip of %q: %s read as %s (%v)", b, want, out, err)
		}
	})
}

// FuzzVerifyDB: the streamed db's sanity check reads the consistent index
// and term from the meta bucket as etcd writes them (8 bytes each, big
// endian, etcd reading the first 8 of a longer value); a db without the key
// or meta bucket, or without an index, is refused. A value etcd could not
// read is refused with an error saying so, not by the panic guard.
func FuzzVerifyDB(f *testing.F) {
	be := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	f.Add(be(120), be(2), uint8(7))
	f.Add(be(0), be(2), uint8(7))
	f.Add(be(120), []byte{}, uint8(3))
	f.Add(be(1), be(1), uint8(6))
	f.Add(be(1), be(1), uint8(5))
	f.Add(append(be(9), 1, 2), be(3), uint8(7))
	f.Fuzz(func(t *testing.T, index, term []byte, parts uint8) {
		path := filepath.Join(t.TempDir(), "db")
		db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			if parts&1 != 0 {
				if _, err := tx.CreateBucket(schema.Key.Name()); err != nil {
					return err
				}
			}
			if parts&2 == 0 {
				return nil
			}
			meta, err := tx.CreateBucket(schema.Meta.Name())
			if err != nil {
				return err
			}
			if parts&4 != 0 {
				if err := meta.Put(schema.MetaConsistentIndexKeyName, index); err != nil {
					return err
				}
			}
			if parts&8 == 0 {
				return meta.Put(schema.MetaTermKeyName, term)
			}
			return nil
		})
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		ci, gotTerm, err := VerifyDB(path)
		hasIndex, hasTerm := parts&6 == 6, parts&2 != 0 && parts&8 == 0
		var wantCI, wantTerm uint64
		readable := !hasIndex || len(index) >= 8
		if hasIndex && len(index) >= 8 {
			wantCI = binary.BigEndian.Uint64(index)
			if hasTerm {
				readable = len(term) >= 8
				if readable {
					wantTerm = binary.BigEndian.Uint64(term)
				}
			}
		}
		ok := parts&3 == 3 && readable && wantCI != 0
		switch {
		case err != nil && strings.Contains(err.Error(), "panicked"):
			t.Fatalf("index %x term %x: caught only by the panic guard: %v", index, term, err)
		case ok && (err != nil || ci != wantCI || gotTerm != wantTerm):
			t.Fatalf("index %x term %x (parts %b): %d, %d, %v; want %d, %d", index, term, parts, ci, gotTerm, err, wantCI, wantTerm)
		case !ok && (err == nil || ci != 0 || gotTerm != 0):
			t.Fatalf("index %x term %x (parts %b): %d, %d, %v; want an error", index, term, parts, ci, gotTerm, err)
		}
	})
}
