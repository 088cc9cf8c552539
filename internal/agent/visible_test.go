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
		err := visibleOnNode(c.id)
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
