package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"go.uber.org/zap"
)

// Each count of bench-scale starts from an empty lab: the members of a lab
// left by an earlier run (make bench runs both shapes in one --dir) were
// restarted, and the 1-member run failed with "0 of 1 members serve". A
// dir that is not a lab is not the bench's to remove.
func TestEachCountStartsFromAnEmptyLab(t *testing.T) {
	for _, withSpec := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "scale-1")
		pv := filepath.Join(dir, "node1", "disk", "pv", "node1-pv-0", "etcd", "member")
		if err := os.MkdirAll(pv, 0o755); err != nil {
			t.Fatal(err)
		}
		if withSpec {
			b, err := json.Marshal(&lab.Spec{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, lab.SpecFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := lab.Open(dir, nil); err != nil {
				t.Fatalf("the leftover lab does not open: %v", err)
			}
		}
		err := emptyLab(context.Background(), dir, zap.NewNop())
		_, gone := os.Stat(dir)
		if withSpec && (err != nil || !errors.Is(gone, fs.ErrNotExist)) {
			t.Fatalf("a leftover lab: %v; still there: %v", err, gone)
		}
		// Without lab.json it is not a lab the bench left: kept, refused.
		if !withSpec && (err == nil || gone != nil) {
			t.Fatalf("a dir that is not a lab: error %v, stat %v; want it refused and kept", err, gone)
		}
	}
	if err := emptyLab(context.Background(), filepath.Join(t.TempDir(), "none"), zap.NewNop()); err != nil {
		t.Fatalf("no dir at all: %v", err)
	}
}
