package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"
)

// makeDataDir writes a data dir whose WAL names member and cluster, as etcd
// does when it starts on an empty dir.
func makeDataDir(t *testing.T, dataDir string, member, cluster uint64) {
	t.Helper()
	md, err := (&etcdserverpb.Metadata{NodeID: member, ClusterID: cluster}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	w, err := wal.Create(zap.NewNop(), filepath.Join(dataDir, "member", "wal"), md)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func ledgerNode(t *testing.T) lab.Node {
	disk := t.TempDir()
	return lab.Node{Name: "node2", DiskDir: disk, DataDir: filepath.Join(disk, "etcd")}
}

func TestLedgerKeepsAQuarantinedDataDir(t *testing.T) {
	n := ledgerNode(t)
	g := newLedger(9)
	makeDataDir(t, n.DataDir, 2, 9)
	g.scan([]lab.Node{n})
	q := filepath.Join(n.DiskDir, "etcd-agent-quarantine", "etcd-1")
	if err := os.MkdirAll(filepath.Dir(q), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(n.DataDir, q); err != nil {
		t.Fatal(err)
	}
	makeDataDir(t, n.DataDir, 0x22, 9) // the rejoined member, a new ID
	if v := g.finish([]lab.Node{n}); len(v) != 0 {
		t.Fatalf("violations for a quarantined dir and a new member: %v", v)
	}
	if g.seenDirs() != 2 {
		t.Fatalf("seen %d data dirs, want 2", g.seenDirs())
	}
}

func TestLedgerFindsADeletedDataDir(t *testing.T) {
	n := ledgerNode(t)
	g := newLedger(9)
	makeDataDir(t, n.DataDir, 2, 9)
	g.scan([]lab.Node{n})
	if err := os.RemoveAll(n.DataDir); err != nil {
		t.Fatal(err)
	}
	v := g.finish([]lab.Node{n})
	if len(v) != 1 || !strings.Contains(v[0], "was deleted") {
		t.Fatalf("want the deletion found, got %v", v)
	}
}

func TestLedgerExcusesTheFaultsOwnWipe(t *testing.T) {
	n := ledgerNode(t)
	g := newLedger(9)
	makeDataDir(t, n.DataDir, 2, 9)
	g.scan([]lab.Node{n})
	g.destroy(n.DataDir, "wipe-running")
	if err := os.RemoveAll(n.DataDir); err != nil {
		t.Fatal(err)
	}
	if v := g.finish([]lab.Node{n}); len(v) != 0 {
		t.Fatalf("the fault's own wipe counted: %v", v)
	}
}

func TestLedgerFindsAFreshDataDirUnderAnOldID(t *testing.T) {
	n := ledgerNode(t)
	g := newLedger(9)
	makeDataDir(t, n.DataDir, 2, 9)
	g.scan([]lab.Node{n})
	g.destroy(n.DataDir, "wipe-running")
	if err := os.RemoveAll(n.DataDir); err != nil {
		t.Fatal(err)
	}
	makeDataDir(t, n.DataDir, 2, 9) // etcd started empty under member 2
	v := g.finish([]lab.Node{n})
	if len(v) != 1 || !strings.Contains(v[0], "under member ID 2, which had data") {
		t.Fatalf("want the old ID on fresh data found, got %v", v)
	}
}

func TestLedgerFindsAForeignDataDir(t *testing.T) {
	n := ledgerNode(t)
	g := newLedger(9)
	makeDataDir(t, n.DataDir, 2, 7)
	v := g.finish([]lab.Node{n})
	if len(v) != 1 || !strings.Contains(v[0], "foreign data dir") {
		t.Fatalf("want the foreign dir found, got %v", v)
	}
}

func TestLedgerIgnoresASeedThrownAwayBeforeUse(t *testing.T) {
	n := ledgerNode(t)
	g := newLedger(9)
	seed := filepath.Join(n.DiskDir, ".etcd-seed-1")
	makeDataDir(t, seed, 0x22, 9)
	g.scan([]lab.Node{n})
	if err := os.RemoveAll(seed); err != nil {
		t.Fatal(err)
	}
	makeDataDir(t, n.DataDir, 0x22, 9) // the retried seed, in place
	if v := g.finish([]lab.Node{n}); len(v) != 0 {
		t.Fatalf("a seed thrown away before etcd used it counted: %v", v)
	}
}

// A scan between the fault's mark and its removal (LoseNode kills the
// node's processes first) must not take the dying dir for a new one.
func TestLedgerSkipsADirAFaultIsRemoving(t *testing.T) {
	n := ledgerNode(t)
	g := newLedger(9)
	makeDataDir(t, n.DataDir, 2, 9)
	g.scan([]lab.Node{n})
	g.destroyNode(n, "lose-node")
	g.scan([]lab.Node{n}) // still there
	if err := os.RemoveAll(n.DiskDir); err != nil {
		t.Fatal(err)
	}
	if v := g.finish([]lab.Node{n}); len(v) != 0 {
		t.Fatalf("a dir scanned while the fault removed it counted: %v", v)
	}
}
