package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/realetcd"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) {
	localdisk.ServeInspectionIfChild() // the hash's child process
	os.Exit(m.Run())
}

// TestStatusHashesAStoppedMembersDBOnlyWhenTheMajorityIsLost: /status
// gives the hash etcd gave of a stopped member's data, read in the
// background (an answer that does not wait says it is being read), only
// while the majority is lost, and kept while the db is unchanged.
func TestStatusHashesAStoppedMembersDBOnlyWhenTheMajorityIsLost(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	p := realetcd.Start(t, realetcd.Binary(t, "etcd"), dataDir, "m1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := p.Client()
	for _, k := range []string{"a", "b", "c", "a"} {
		if _, err := cli.Put(ctx, k, k+"1"); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "leased", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	want, err := cli.HashKV(ctx, cli.Endpoints()[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(t)

	scratch := filepath.Join(t.TempDir(), hashScratchDir)
	h := newDBHasher(scratch, zap.NewNop())
	report := func(lost bool) Report {
		r := Report{MajorityLost: lost, Where: &Where{DataDir: dataDir}}
		r.Observation.Local = observation.Local{Name: "m1", DataDirClass: "ok"}
		return r
	}
	withQuorum := report(false)
	h.add(ctx, &withQuorum, time.Minute)
	if withQuorum.DataDirHash != nil || withQuorum.DataDirHashNote != "" {
		t.Fatalf("a stopped member in a cluster with its quorum: %+v, %q; its db is not read", withQuorum.DataDirHash, withQuorum.DataDirHashNote)
	}
	first := report(true)
	h.add(ctx, &first, 0)
	if first.DataDirHash != nil || !strings.Contains(first.DataDirHashNote, "being hashed (since") {
		t.Fatalf("an answer that does not wait: %+v, %q; want it to say the hash is being read", first.DataDirHash, first.DataDirHashNote)
	}
	for _, n := range []string{"the hash it started", "the hash kept"} {
		r := report(true)
		h.add(ctx, &r, time.Minute)
		if r.DataDirHash == nil || r.DataDirHash.Hash != want.Hash || r.DataDirHash.Revision != want.Header.Revision {
			t.Fatalf("%s: %+v (%q); its etcd said %d at revision %d", n, r.DataDirHash, r.DataDirHashNote, want.Hash, want.Header.Revision)
		}
	}
	if left, _ := os.ReadDir(scratch); len(left) != 1 || left[0].Name() != ".lock" {
		t.Fatalf("the copy was left in %s: %v", scratch, left)
	}
	// A db that changed is hashed again (here: it cannot be, and says why).
	if err := os.Truncate(filepath.Join(dataDir, "member", "snap", "db"), 0); err != nil {
		t.Fatal(err)
	}
	changed := report(true)
	h.add(ctx, &changed, time.Minute)
	if changed.DataDirHash != nil || changed.DataDirHashNote == "" {
		t.Fatalf("a db that changed since its hash: %+v, %q; want it read again", changed.DataDirHash, changed.DataDirHashNote)
	}
}
