package agent

import (
	"os"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Issue 38 (review): a static-pod agent read its manifest once. An
// operator's move of the WAL to a dedicated --wal-dir under a running agent
// left it looking for member/wal: a healthy voter judged corrupt and
// replaced (e2e TestMovingAMembersWALToADedicatedDirUnderARunningAgent).
// identityDrift names the change, so the member's loop starts again on the
// new identity; never while a recovery is open.
func TestIdentityDriftSeesAWALDirAddedToTheManifest(t *testing.T) {
	path := plainManifest(t)
	c := Config{StaticPodManifest: path, StateDir: t.TempDir()}
	id, err := ResolveIdentity(c)
	if err != nil {
		t.Fatal(err)
	}
	if why := identityDrift(c, id); why != "" {
		t.Fatalf("unchanged manifest: drift %q", why)
	}
	withWAL, _ := os.ReadFile(walDirManifest(t, false))
	rewrite(t, path, string(withWAL))
	if why := identityDrift(c, id); !strings.Contains(why, "/mnt/wal-disk/wal") {
		t.Fatalf("--wal-dir added: drift %q, want it named", why)
	}
	if err := journal.Save(c.StateDir, record.Record{Member: id.Name, ID: "j1", Phase: record.PhaseStopped}); err != nil {
		t.Fatal(err)
	}
	if why := identityDrift(c, id); why != "" {
		t.Fatalf("a recovery is open: drift %q, want none (the recovery keeps its identity)", why)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(journal.Path(c.StateDir, id.Name)); err != nil {
		t.Fatal(err)
	}
	if why := identityDrift(c, id); why != "" {
		t.Fatalf("manifest gone: drift %q, want none (nothing to read)", why)
	}
}
