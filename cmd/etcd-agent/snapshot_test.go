package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
)

// `etcd-agent snapshot list|get` on a file store: lists what the agent
// uploaded, fetches it verified, refuses a corrupt object and bad input.
func TestSnapshotCommandListsAndFetchesVerified(t *testing.T) {
	root := t.TempDir()
	url := "file://" + root
	s, err := snapshotstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := []byte(strings.Repeat("snapshot!", 1000))
	p := filepath.Join(t.TempDir(), "s.db")
	os.WriteFile(p, b, 0o600)
	sum := sha256.Sum256(b)
	o, err := s.Put(context.Background(), snapshotstore.Meta{ClusterID: 0x6fa1, Member: "node2", MemberID: 0x2a, Source: "node3",
		TakenAt: time.Now(), SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b)), EtcdVersion: "3.6.0"}, p)
	if err != nil {
		t.Fatal(err)
	}
	out, err := execute("snapshot", "list", "6fa1", "--snapshot-store", url)
	if err != nil || !strings.Contains(out, o.Key) || !strings.Contains(out, "node3") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	dst := filepath.Join(t.TempDir(), "got.db")
	if out, err := execute("snapshot", "get", o.Key, dst, "--snapshot-store", url); err != nil || !strings.Contains(out, "verified") {
		t.Fatalf("get: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(dst); string(got) != string(b) {
		t.Fatal("fetched content differs")
	}
	obj := filepath.Join(root, filepath.FromSlash(o.Key))
	if err := os.WriteFile(obj, append(b[:len(b)-1], 'X'), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := execute("snapshot", "get", o.Key, filepath.Join(t.TempDir(), "bad.db"), "--snapshot-store", url); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("get of a corrupt object: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"snapshot", "list", "not-hex", "--snapshot-store", url},
		{"snapshot", "list", "6fa1", "--snapshot-store", "ftp://x"},
		{"snapshot", "list", "6fa1"},
	} {
		if out, err := execute(args...); err == nil {
			t.Errorf("%v: no error\n%s", args, out)
		}
	}
}
