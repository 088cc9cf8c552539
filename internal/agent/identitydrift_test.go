package agent

import (
	"os"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/record"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
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
	if why := identityDriftOK(t, c, id); why != "" {
		t.Fatalf("unchanged manifest: drift %q", why)
	}
	withWAL, _ := os.ReadFile(walDirManifest(t, false))
	rewrite(t, path, string(withWAL))
	if why := identityDriftOK(t, c, id); !strings.Contains(why, "/mnt/wal-disk/wal") {
		t.Fatalf("--wal-dir added: drift %q, want it named", why)
	}
	if err := journal.Save(c.StateDir, record.Record{Member: id.Name, ID: "j1", Phase: record.PhaseStopped}); err != nil {
		t.Fatal(err)
	}
	if why := identityDriftOK(t, c, id); why != "" {
		t.Fatalf("a recovery is open: drift %q, want none (the recovery keeps its identity)", why)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(journal.Path(c.StateDir, id.Name)); err != nil {
		t.Fatal(err)
	}
	if why := identityDriftOK(t, c, id); why != "" {
		t.Fatalf("manifest gone: drift %q, want none (nothing to read)", why)
	}
}

func identityDriftOK(t *testing.T, c Config, id watchdog.Identity) string {
	t.Helper()
	why, err := identityDrift(c, id)
	if err != nil {
		t.Fatalf("identityDrift: %v", err)
	}
	return why
}

// Review (session 26): a manifest changed into one that gives no identity
// (its --wal-dir now disagrees with the agent's flag) was taken for a
// manifest being rewritten, and the loop went on with the old WAL dir: the
// healthy member read corrupt and replaced. It is an error that ends the
// loop; the agent exits saying why, as at its start.
func TestAManifestThatNoLongerGivesAnIdentityEndsTheLoop(t *testing.T) {
	path := walDirManifest(t, false)
	c := Config{StaticPodManifest: path, StateDir: t.TempDir(), WALDir: "/mnt/wal-disk/wal"}
	id, err := ResolveIdentity(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	rewrite(t, path, strings.Replace(string(b), "--wal-dir=/var/lib/etcd-wal/wal", "--wal-dir=/var/lib/etcd-wal/wal2", 1))
	why, err := identityDrift(c, id)
	if err == nil || !strings.Contains(err.Error(), "wal2") {
		t.Fatalf("drift %q, err %v; want an error naming the new WAL dir", why, err)
	}
}
