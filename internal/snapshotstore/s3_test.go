package snapshotstore_test

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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
)

// s3Store starts the lab's real S3 server (SeaweedFS, bin/weed) for one
// test and opens the store on it with the lab's credentials.
func s3Store(t *testing.T) (*snapshotstore.Store, *lab.SnapshotStore, *s3.Client) {
	t.Helper()
	root, err := labtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	if err := labtest.CheckBinaries(bin, "weed"); err != nil {
		t.Fatal(err)
	}
	srv, err := lab.StartS3Server(context.Background(), bin, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	for k, v := range srv.Env() {
		t.Setenv(k, v)
	}
	s, err := snapshotstore.Open(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	raw := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(lab.S3AccessKey, lab.S3SecretKey, "")})
	return s, srv, raw
}

func snapshot(t *testing.T, n int) (string, snapshotstore.Meta) {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + i/7)
	}
	p := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return p, snapshotstore.Meta{ClusterID: 0xc1, Member: "etcd-1", MemberID: 0x11, Source: "etcd-0", TakenAt: time.Now().UTC(),
		SHA256: hex.EncodeToString(sum[:]), Size: int64(n), EtcdVersion: "3.6.0"}
}

// TestS3StoreRoundTripRefusesCorruptAndHalfWrittenObjects: against a real
// S3-compatible server (issue 15): an upload (multipart: 12 MiB) reads back
// verified; an object whose bytes were replaced behind the agent's back
// (metadata kept) is refused by its sha256; a multipart upload never
// completed (a writer that died) is no object; the server stopped, the
// store says it does not answer.
func TestS3StoreRoundTripRefusesCorruptAndHalfWrittenObjects(t *testing.T) {
	ctx := context.Background()
	s, srv, raw := s3Store(t)
	p, m := snapshot(t, 12<<20)
	o, err := s.Put(ctx, m, p)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "got.db")
	got, err := s.Get(ctx, o.Key, dst)
	if err != nil || got.SHA256 != m.SHA256 || got.Size != m.Size {
		t.Fatalf("get: %+v %v", got, err)
	}
	a, _ := os.ReadFile(p)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Fatal("content differs")
	}

	// Replaced content, same metadata (as a tool that rewrote it would).
	head, err := raw.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(lab.S3Bucket), Key: aws.String(o.Key)})
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(a)
	bad[len(bad)/3] ^= 0x55
	if _, err := raw.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(lab.S3Bucket), Key: aws.String(o.Key), Body: bytes.NewReader(bad),
		Metadata: head.Metadata}); err != nil {
		t.Fatal(err)
	}
	dst2 := filepath.Join(t.TempDir(), "got.db")
	if _, err := s.Get(ctx, o.Key, dst2); !errors.Is(err, snapshotstore.ErrCorrupt) {
		t.Fatalf("get of a replaced object: %v, want ErrCorrupt", err)
	}
	if _, err := os.Stat(dst2); !os.IsNotExist(err) {
		t.Fatalf("a refused download left %s", dst2)
	}

	// A multipart upload begun and never completed: no object.
	_, m2 := snapshot(t, 1000)
	m2.TakenAt = m2.TakenAt.Add(time.Minute)
	halfKey := snapshotstore.Key(m2)
	up, err := raw.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(lab.S3Bucket), Key: aws.String(halfKey)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(lab.S3Bucket), Key: aws.String(halfKey), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(a[:6<<20])}); err != nil {
		t.Fatal(err)
	}
	objs, badKeys, err := s.List(ctx, 0xc1)
	if err != nil || len(objs) != 1 || objs[0].Key != o.Key || len(badKeys) != 0 {
		t.Fatalf("list with a half-written upload: %+v bad %v err %v", objs, badKeys, err)
	}
	if _, err := s.Get(ctx, halfKey, filepath.Join(t.TempDir(), "half.db")); err == nil {
		t.Fatalf("a half-written object was read")
	}

	// A canceled upload leaves no object either.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, m2, p); err == nil {
		t.Fatal("a canceled upload succeeded")
	}
	if objs, _, _ := s.List(ctx, 0xc1); len(objs) != 1 {
		t.Fatalf("a canceled upload left %+v", objs)
	}

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
	defer tcancel()
	if err := s.Check(tctx); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("check with the server stopped: %v", err)
	}
}
