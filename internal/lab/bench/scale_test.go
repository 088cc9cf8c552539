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
// restarted, and the 1-member run failed with "0 of 1 members serve".
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
		if err := emptyLab(context.Background(), dir, zap.NewNop()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("a leftover lab (with lab.json: %v) is still there: %v", withSpec, err)
		}
	}
}
