package localdisk

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAStoppedMembersHashIsTheOneItsEtcdGave: the hash a person compares
// survivors by is etcd's own HashKV: read from a stopped member's data dir,
// it equals what the member's etcd answered before it stopped, with its
// compaction and a leased key in it (3.5 and 3.6 data dirs), and leaves
// no copy behind.
func TestAStoppedMembersHashIsTheOneItsEtcdGave(t *testing.T) {
	onEtcdBinaries(t, func(t *testing.T, bin string) {
		dataDir := filepath.Join(t.TempDir(), "data")
		p := startEtcdWith(t, bin, dataDir, "m0")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli := p.client()
		for i := range 50 {
			if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i%7), fmt.Sprintf("v%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		// A key under a lease, as kube-apiserver's masterleases and events
		// are: restoring the store attaches it to its lease.
		lease, err := cli.Grant(ctx, 3600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "leased", "v", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, 20, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		want, err := cli.HashKV(ctx, cli.Endpoints()[0], 0)
		if err != nil {
			t.Fatal(err)
		}
		scratch := t.TempDir()
		if _, err := HashDBIsolated(ctx, Dirs{Data: dataDir}, scratch); err == nil || !strings.Contains(err.Error(), "held by a running member") {
			t.Fatalf("hash of a running member's db: %v; want it refused as held", err)
		}
		p.stop(t)
		// A copy an earlier hash left (its parent and child killed) is
		// removed by the next one.
		stale := filepath.Join(scratch, "hashkv-1234", "db")
		if err := os.MkdirAll(filepath.Dir(stale), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stale, []byte("old copy"), 0o600); err != nil {
			t.Fatal(err)
		}
		dbPath := filepath.Join(dataDir, dbRelPath)
		before, _ := os.ReadFile(dbPath)
		got, err := HashDBIsolated(ctx, Dirs{Data: dataDir}, scratch)
		if err != nil {
			t.Fatal(err)
		}
		if after, _ := os.ReadFile(dbPath); len(before) == 0 || !bytes.Equal(before, after) {
			t.Fatalf("the member's db changed while hashed (%d bytes before, %d after)", len(before), len(after))
		}
		if got.Hash != want.Hash || got.Revision != want.Header.Revision || got.CompactRevision != want.CompactRevision {
			t.Fatalf("hash of the stopped member's db %+v; its etcd said %d at revision %d (compacted at %d)", got, want.Hash, want.Header.Revision, want.CompactRevision)
		}
		if left, _ := os.ReadDir(scratch); len(left) != 1 || left[0].Name() != hashLockFile {
			t.Fatalf("the copy was left in %s: %v", scratch, left)
		}
	})
}

// TestOneHashRunsAtATime: two processes (the agent, a status --cluster)
// each check the free space for one copy: the second is refused while the
// first holds the scratch dir's lock, and leaves the first's copy alone.
func TestOneHashRunsAtATime(t *testing.T) {
	m := copyOfGolden(t)
	scratch := t.TempDir()
	f, err := os.OpenFile(filepath.Join(scratch, hashLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	running := filepath.Join(scratch, "hashkv-running")
	if err := os.Mkdir(running, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := HashDBIsolated(context.Background(), Dirs{Data: m.dataDir}, scratch); err == nil || !strings.Contains(err.Error(), "another hash runs") {
		t.Fatalf("a hash while another holds the lock: %v", err)
	}
	if _, err := os.Stat(running); err != nil {
		t.Fatalf("the running hash's copy was removed: %v", err)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if _, err := HashDBIsolated(context.Background(), Dirs{Data: m.dataDir}, scratch); err != nil {
		t.Fatalf("once the lock is free: %v", err)
	}
}
