package peerseed

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"
)

func ctxWithTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustLeaveNothing fails if dest or its .part file exists.
func mustLeaveNothing(t *testing.T, dest string) {
	t.Helper()
	for _, p := range []string{dest, dest + ".part"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a refused stream (stat err %v)", p, err)
		}
	}
}

// followerEndpoint picks the source the agent would pick in the lab.
func followerEndpoint(t testing.TB) (endpoint, name string) {
	t.Helper()
	return followerEndpointOf(t, realLab(t))
}

// followerEndpointOf is followerEndpoint in lab l.
func followerEndpointOf(t testing.TB, l *lab.Lab) (endpoint, name string) {
	t.Helper()
	obs := observe(t, l)
	m, reason, err := plan.PickSource(obs, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.IsLeader {
		t.Fatalf("picked the leader in a healthy lab: %s", reason)
	}
	t.Logf("source: %s", reason)
	return m.ClientURLs[0], m.Name
}

var writeTestKeys sync.Once

func TestStreamFromAFollowerGivesAVerifiedBoltDB(t *testing.T) {
	l := realLab(t)
	writeTestKeys.Do(func() { putKeys(t, l, "stream-test", 200, 1024) })
	endpoint, name := followerEndpoint(t)

	dest := filepath.Join(t.TempDir(), "snapshot.db")
	var progressed int64
	snap, err := Stream(ctxWithTimeout(t, time.Minute), endpoint, nil, dest, plan.StreamBytesNeeded(0), func(n int64) { progressed += n })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("streamed %d bytes from %s (etcd %s) in %s", snap.Size, snap.Source, snap.Version, snap.Took)

	if snap.Path != dest || snap.Source != name || snap.Version == "" {
		t.Errorf("snapshot = %+v, want path %s, source %s and a version", snap, dest, name)
	}
	data, err := os.ReadFile(dest)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != snap.Size || snap.Size%4096 != 0 {
		t.Errorf("file has %d bytes, snapshot says %d; want equal and whole 4 KiB pages (hash stripped)", len(data), snap.Size)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != snap.SHA256 {
		t.Errorf("file sha256 %x, snapshot says %s", sum, snap.SHA256)
	}
	if progressed != snap.Size+sha256.Size {
		t.Errorf("progress reported %d bytes, want the whole stream (%d)", progressed, snap.Size+sha256.Size)
	}
	ci, term, err := VerifyDB(dest)
	if err != nil {
		t.Fatal(err)
	}
	if ci == 0 || term == 0 {
		t.Errorf("consistent index %d term %d, want both > 0", ci, term)
	}
	db, err := bolt.Open(dest, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket([]byte("key")).Stats().KeyN; n < 200 {
			return fmt.Errorf("key bucket has %d entries, want the 200 written", n)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(dest + ".part"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf(".part file left behind: %v", err)
	}
}

func TestStreamRefusesAlteredStreamsAndLeavesNoFile(t *testing.T) {
	endpoint, _ := followerEndpoint(t)
	raw := rawSnapshot(t, endpoint)
	flipped := bytes.Clone(raw)
	flipped[len(raw)/2] ^= 0x04

	tests := []struct {
		name   string
		stream io.Reader
		want   error
	}{
		{"one flipped byte", bytes.NewReader(flipped), ErrHashMismatch},
		{"cut short", bytes.NewReader(raw[:len(raw)-1000]), ErrTruncated},
		{"hash missing", bytes.NewReader(raw[:len(raw)-sha256.Size]), ErrNoHash},
		{"connection broken", io.MultiReader(bytes.NewReader(raw[:len(raw)/2]), brokenReader{}), ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "snapshot.db")
			_, _, err := streamToFile(ctxWithTimeout(t, time.Minute), tt.stream, dest, nil, nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			mustLeaveNothing(t, dest)
		})
	}
	t.Run("the unaltered stream passes", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "snapshot.db")
		size, _, err := streamToFile(ctxWithTimeout(t, time.Minute), bytes.NewReader(raw), dest, nil, nil)
		if err != nil || size != int64(len(raw)-sha256.Size) {
			t.Fatalf("size %d err %v, want %d nil", size, err, len(raw)-sha256.Size)
		}
	})
}

type brokenReader struct{}

func (brokenReader) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

func TestStreamRefusesWhenTheDiskIsTooSmall(t *testing.T) {
	endpoint, _ := followerEndpoint(t)
	dest := filepath.Join(t.TempDir(), "snapshot.db")
	_, err := Stream(ctxWithTimeout(t, time.Minute), endpoint, nil, dest, 1<<62, nil)
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "free") {
		t.Fatalf("got %v, want ErrDiskFull with the numbers", err)
	}
	mustLeaveNothing(t, dest)
}

func TestStreamNeverReplacesAnExistingFile(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "snapshot.db")
	if err := os.WriteFile(dest, []byte("an earlier backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	// No connection is made: the check comes first.
	if _, err := Stream(ctxWithTimeout(t, 5*time.Second), "http://127.0.0.1:1", nil, dest, 0, nil); err == nil {
		t.Fatal("want an error")
	}
	if b, _ := os.ReadFile(dest); string(b) != "an earlier backup" {
		t.Fatalf("existing file changed to %q", b)
	}
}

// BenchmarkStream compares, side by side, the stream with the client
// dialled as Stream does (tuned) and with gRPC's defaults.
func BenchmarkStream(b *testing.B) {
	l := realLab(b)
	writeBenchKeys.Do(func() { putKeys(b, l, "bench", 800, 8<<10) }) // ~6.5 MB of values
	endpoint, _ := followerEndpoint(b)
	tuned := streamDial
	defer func() { streamDial = tuned }()
	for _, v := range []struct {
		name string
		dial []grpc.DialOption
	}{{"tuned", tuned}, {"grpc-defaults", nil}} {
		b.Run(v.name, func(b *testing.B) {
			streamDial = v.dial
			dir := b.TempDir()
			b.ResetTimer()
			for i := range b.N {
				dest := filepath.Join(dir, fmt.Sprintf("snap-%d.db", i))
				snap, err := Stream(context.Background(), endpoint, nil, dest, plan.StreamBytesNeeded(0), nil)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(snap.Size)
				b.StopTimer()
				os.Remove(dest)
				b.StartTimer()
			}
		})
	}
}

var writeBenchKeys sync.Once
