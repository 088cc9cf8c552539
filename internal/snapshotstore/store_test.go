package snapshotstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// snapshotFile writes n bytes of content to a file and describes it.
func snapshotFile(t *testing.T, dir string, n int, at time.Time) (string, Meta) {
	t.Helper()
	b := bytes.Repeat([]byte("etcd-snapshot-"), n/14+1)[:n]
	p := filepath.Join(dir, "snap-"+at.Format("150405.000")+".db")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return p, Meta{ClusterID: 0xc1, Member: "node2", MemberID: 0x2a, Source: "node3", TakenAt: at, SHA256: hex.EncodeToString(sum[:]),
		Size: int64(n), EtcdVersion: "3.6.0", Revision: 42}
}

func openFileStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(context.Background(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func TestPutListGetRoundTripVerified(t *testing.T) {
	ctx := context.Background()
	s, _ := openFileStore(t)
	src := t.TempDir()
	at := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	p, m := snapshotFile(t, src, 100_000, at)
	o, err := s.Put(ctx, m, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(o.Key, "etcd-agent/00000000000000c1/20261202T210000.000Z-node2-") {
		t.Fatalf("key %q", o.Key)
	}
	objs, bad, err := s.List(ctx, 0xc1)
	if err != nil || len(objs) != 1 || len(bad) != 0 || objs[0].Meta != m {
		t.Fatalf("list: %+v bad %v err %v; want %+v", objs, bad, err, m)
	}
	dst := filepath.Join(t.TempDir(), "got.db")
	got, err := s.Get(ctx, o.Key, dst)
	if err != nil || got != m {
		t.Fatalf("get: %+v %v", got, err)
	}
	a, _ := os.ReadFile(p)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Fatal("downloaded content differs")
	}
	if other, _, _ := s.List(ctx, 0xc2); len(other) != 0 {
		t.Fatalf("another cluster's list has %v", other)
	}
}

func TestACorruptOrTruncatedObjectIsRefusedAndLeavesNothing(t *testing.T) {
	ctx := context.Background()
	for name, damage := range map[string]func(path string) error{
		"a byte flipped": func(path string) error {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0xff
			return os.WriteFile(path, b, 0o600)
		},
		"truncated": func(path string) error { return os.Truncate(path, 5000) },
		"longer":    func(path string) error { return appendBytes(path, []byte("x")) },
		"metadata gone": func(path string) error {
			return os.Remove(path + ".attrs")
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, root := openFileStore(t)
			p, m := snapshotFile(t, t.TempDir(), 50_000, time.Now())
			o, err := s.Put(ctx, m, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := damage(filepath.Join(root, filepath.FromSlash(o.Key))); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "got.db")
			if _, err := s.Get(ctx, o.Key, dst); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("get: %v, want ErrCorrupt", err)
			}
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), "*")); len(left) != 0 {
				t.Fatalf("a refused download left %v", left)
			}
		})
	}
}

func appendBytes(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(b)
	return err
}

// A writer that dies mid-upload leaves at most fileblob's temp file (or,
// on S3, an incomplete multipart upload that is no object): never listed as
// a snapshot, never read as one. A file without the agent's metadata (put
// there by hand) is not one either.
func TestAHalfWrittenObjectIsNeverUsed(t *testing.T) {
	ctx := context.Background()
	s, root := openFileStore(t)
	p, m := snapshotFile(t, t.TempDir(), 50_000, time.Now())
	key := Key(m)
	dir := filepath.Join(root, filepath.FromSlash(filepath.Dir(key)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	half, _ := os.ReadFile(p)
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(key))+".18a2b3c4d5e6f708.tmp", half[:20_000], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "by-hand.db"), half, 0o644); err != nil {
		t.Fatal(err)
	}
	objs, bad, err := s.List(ctx, m.ClusterID)
	if err != nil || len(objs) != 0 || len(bad) != 2 {
		t.Fatalf("list: %+v bad %v err %v; want nothing good, 2 bad", objs, bad, err)
	}
	if _, err := s.Get(ctx, strings.TrimPrefix(filepath.ToSlash(filepath.Join(filepath.Dir(key), "by-hand.db")), "/"), filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("get of an object without metadata: %v", err)
	}
	// An upload canceled halfway: no object.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, m, p); err == nil {
		t.Fatal("a canceled upload succeeded")
	}
	if objs, _, _ := s.List(ctx, m.ClusterID); len(objs) != 0 {
		t.Fatalf("a canceled upload left %+v", objs)
	}
}

func TestPutRefusesAFileThatChangedSinceItWasVerified(t *testing.T) {
	ctx := context.Background()
	s, _ := openFileStore(t)
	p, m := snapshotFile(t, t.TempDir(), 50_000, time.Now())
	m.SHA256 = strings.Repeat("0", 64)
	if _, err := s.Put(ctx, m, p); err == nil || !strings.Contains(err.Error(), "changed since it was verified") {
		t.Fatalf("put: %v", err)
	}
	if objs, bad, _ := s.List(ctx, m.ClusterID); len(objs)+len(bad) != 0 {
		t.Fatalf("a refused upload left %+v %v", objs, bad)
	}
	if _, err := s.Put(ctx, Meta{ClusterID: 1}, p); err == nil {
		t.Fatal("an incomplete description was accepted")
	}
}

func TestPruneKeepsTheNewest(t *testing.T) {
	ctx := context.Background()
	s, _ := openFileStore(t)
	src := t.TempDir()
	t0 := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	var keys []string
	for i := range 4 {
		p, m := snapshotFile(t, src, 1000+i, t0.Add(time.Duration(i)*time.Minute))
		o, err := s.Put(ctx, m, p)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	if d, err := s.Prune(ctx, 0xc1, 0); err != nil || len(d) != 0 {
		t.Fatalf("keep 0 deleted %v (%v)", d, err)
	}
	d, err := s.Prune(ctx, 0xc1, 2)
	if err != nil || len(d) != 2 || d[0] != keys[0] || d[1] != keys[1] {
		t.Fatalf("prune: %v %v; want the two oldest of %v", d, err, keys)
	}
	objs, _, _ := s.List(ctx, 0xc1)
	if len(objs) != 2 || objs[0].Key != keys[2] || objs[1].Key != keys[3] {
		t.Fatalf("left %+v", objs)
	}
}

func TestOpenRefusesWhatItCannotServe(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"gs://bucket", "file://relative/dir", "file:///does/not/exist", "s3://", "::"} {
		if s, err := Open(ctx, u); err == nil {
			s.Close()
			t.Errorf("Open(%q) accepted", u)
		}
	}
	if got := Redact("s3://key:secret@bucket?endpoint=http://x"); strings.Contains(got, "secret") {
		t.Fatalf("Redact kept the secret: %s", got)
	}
}

// An S3 endpoint that does not answer: Check says so within its context.
func TestCheckSaysWhenTheStoreDoesNotAnswer(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "x")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "y")
	s, err := Open(context.Background(), "s3://bucket?endpoint=http://127.0.0.1:1&region=us-east-1&use_path_style=true&disable_https=true")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Check(ctx); err == nil {
		t.Fatal("an unreachable store answered")
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("Check took %s", d)
	}
}

// Bad input changes nothing: an existing destination is not overwritten;
// a store that drops metadata is refused at upload, leaving no object.
func TestGetNeverOverwritesAndPutRefusesAStoreWithoutMetadata(t *testing.T) {
	ctx := context.Background()
	s, _ := openFileStore(t)
	p, m := snapshotFile(t, t.TempDir(), 5000, time.Now())
	o, err := s.Put(ctx, m, p)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "mine.db")
	if err := os.WriteFile(dst, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, o.Key, dst); err == nil || !strings.Contains(err.Error(), "not overwritten") {
		t.Fatalf("get over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "precious" {
		t.Fatal("an existing file was overwritten")
	}

	dir := t.TempDir()
	bare, err := Open(ctx, "file://"+dir+"?metadata=skip")
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := bare.Put(ctx, m, p); err == nil || !strings.Contains(err.Error(), "metadata did not read back") {
		t.Fatalf("put to a store without metadata: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "etcd-agent", "*", "*")); len(left) != 0 {
		t.Fatalf("a refused upload left %v", left)
	}
}
