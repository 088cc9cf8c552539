package heal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.uber.org/zap"
)

func TestSeedModeOnlyAgainstOneProvenMinor(t *testing.T) {
	obs := func(versions ...string) observation.Observation {
		var o observation.Observation
		for i, v := range versions {
			o.Members = append(o.Members, observation.Member{ID: uint64(i + 1), Name: v, Serving: v != "", Version: v})
		}
		return o
	}
	if err := seedSupported(obs("3.6.16", "3.6.16", "3.6.15")); err != nil {
		t.Fatalf("3.6 cluster refused: %v", err)
	}
	if err := seedSupported(obs("3.7.3", "3.7.3", "3.7.0")); err != nil {
		t.Fatalf("3.7 cluster refused: %v", err)
	}
	if err := seedSupported(obs("3.6.16", "", "3.6.16")); err != nil {
		t.Fatalf("a member that does not serve has no say: %v", err)
	}
	for _, v := range []string{"3.5.21", "3.8.0", "3.60.0-junk", "3.7.3"} {
		if err := seedSupported(obs("3.6.16", v)); !errors.Is(err, errSeedUnsupportedVersion) {
			t.Fatalf("3.6.16 with %s: %v, want errSeedUnsupportedVersion", v, err)
		}
	}
}

// Seed streams are transient: removeSeedStreams takes this member's (db,
// .part, provenance record) and nothing else from the quarantine.
func TestRemoveSeedStreamsTakesOnlyThisMembersStreams(t *testing.T) {
	dir := t.TempDir()
	h := &Healer{cfg: Config{Member: "node2", QuarantineDir: dir}, log: zap.NewNop()}
	mine := []string{"seed-node2-2026-11-30T05-20-09.438Z.db", "seed-node2-2026-11-30T05-20-09.438Z.db.part",
		"seed-node2-2026-11-30T05-20-09.438Z.db.seed.json"}
	kept := []string{"seed-node2-b-2026-11-30T05-20-09.438Z.db", "snapshot-node2-2026-11-30T05-20-09Z.db", "etcd-2026-11-30T05-20-09.1Z"}
	for _, f := range append(append([]string{}, mine...), kept...) {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.removeSeedStreams()
	for _, f := range mine {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s not removed (%v)", f, err)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s removed: %v", f, err)
		}
	}
}
