package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/watchdog"
)

// Review (issue 38): a --wal-dir on a host path the DaemonSet does not
// mount was read as missing (a wiped member) and the healthy member
// replaced, its WAL left where etcd reads it. The agent now says so and
// acts on nothing: an identity it cannot see is an error.
func TestADirTheAgentCannotSeeIsAnError(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "var", "lib", "etcd")
	if err := os.MkdirAll(filepath.Dir(data), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		id   watchdog.Identity
		bad  string // "" visible
	}{
		{"data dir missing, its parent there (a wipe)", watchdog.Identity{Name: "m", DataDir: data}, ""},
		{"WAL dir's parent not mounted", watchdog.Identity{Name: "m", DataDir: data, WALDir: filepath.Join(root, "mnt", "nvme", "wal")}, "mnt/nvme"},
		{"data dir's parent not mounted", watchdog.Identity{Name: "m", DataDir: filepath.Join(root, "data", "etcd")}, "data dir"},
	} {
		err := visibleOnNode(c.id, nil)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v, want visible", c.name, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.bad)
		case err != nil && errors.Is(err, fs.ErrNotExist):
			t.Errorf("%s: %v wraps ErrNotExist, which waitForIdentity waits on as a manifest not there yet", c.name, err)
		}
	}
}

// Review (session 26): /var exists in every container, so a
// --wal-dir=/var/etcd-wal with only /var/lib mounted passed the parent
// check. With --node-paths (the DaemonSet's hostPath mounts) a dir outside
// them is an error.
func TestADirOutsideTheNodePathsIsAnError(t *testing.T) {
	id := watchdog.Identity{Name: "m", DataDir: "/var/lib/etcd", WALDir: "/var/etcd-wal"}
	if err := visibleOnNode(id, nil); err != nil {
		t.Fatalf("without --node-paths only the parents count: %v", err)
	}
	err := visibleOnNode(id, []string{"/var/lib", "/etc/kubernetes/manifests"})
	if err == nil || !strings.Contains(err.Error(), "/var/etcd-wal") {
		t.Fatalf("%v, want an error naming the WAL dir outside the node paths", err)
	}
	if err := visibleOnNode(watchdog.Identity{Name: "m", DataDir: "/var/lib/etcd"}, []string{"/var/lib/"}); err != nil {
		t.Fatalf("a data dir under a node path: %v", err)
	}
	if err := visibleOnNode(watchdog.Identity{Name: "m", DataDir: "/var/lib2/etcd"}, []string{"/var/lib"}); err == nil {
		t.Fatal("/var/lib2 counted as under /var/lib")
	}
}
