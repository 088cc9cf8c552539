package heal

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
)

// Seed streams are transient: removeSeedStreams takes this member's (db,
// .part, provenance record), and the provenance records written beside its
// backups, and nothing else from the quarantine (never a backup).
func TestRemoveSeedStreamsTakesOnlyThisMembersStreams(t *testing.T) {
	dir := t.TempDir()
	h := &Healer{cfg: Config{Member: "node2", QuarantineDir: dir}, log: zap.NewNop()}
	mine := []string{"seed-node2-2026-11-30T05-20-09.438Z.db", "seed-node2-2026-11-30T05-20-09.438Z.db.part",
		"seed-node2-2026-11-30T05-20-09.438Z.db.seed.json",
		// a backup's provenance record (seedFromBackup) and its temp file
		"snapshot-node2-2026-11-30T05-20-09Z.db.seed.json", ".snapshot-node2-2026-11-30T05-20-09Z.db.seed.json.tmp-123"}
	// The backup itself, and another member's backup record, are kept.
	kept := []string{"seed-node2-b-2026-11-30T05-20-09.438Z.db", "snapshot-node2-2026-11-30T05-20-09Z.db", "etcd-2026-11-30T05-20-09.1Z",
		"snapshot-node2-b-2026-11-30T05-20-09Z.db.seed.json", "snapshot-node2-2026-11-30T05-20-09Z.db.part"}
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

// Member "etcd" must not take member "etcd-2"'s seed streams (the glob
// seed-etcd-[0-9]* matched "seed-etcd-2-2026-..."), nor "etcd-2" the ones
// of "etcd": only this member's exact <prefix><stamp>.db[...] names go.
func TestRemoveSeedStreamsSparesAMemberWithADigitSuffix(t *testing.T) {
	dir := t.TempDir()
	stamp := "2026-11-30T05-20-09.438Z"
	etcd := []string{"seed-etcd-" + stamp + ".db", "seed-etcd-" + stamp + ".db.part", "seed-etcd-" + stamp + ".db.seed.json"}
	etcd2 := []string{"seed-etcd-2-" + stamp + ".db", "seed-etcd-2-" + stamp + ".db.part", "seed-etcd-2-" + stamp + ".db.seed.json"}
	for _, f := range append(append([]string{}, etcd...), etcd2...) {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(f string) bool { _, err := os.Stat(filepath.Join(dir, f)); return err == nil }

	(&Healer{cfg: Config{Member: "etcd", QuarantineDir: dir}, log: zap.NewNop()}).removeSeedStreams()
	for _, f := range etcd {
		if exists(f) {
			t.Errorf("member etcd's %s not removed", f)
		}
	}
	for _, f := range etcd2 {
		if !exists(f) {
			t.Errorf("member etcd removed member etcd-2's %s", f)
		}
	}

	(&Healer{cfg: Config{Member: "etcd-2", QuarantineDir: dir}, log: zap.NewNop()}).removeSeedStreams()
	for _, f := range etcd2 {
		if exists(f) {
			t.Errorf("member etcd-2's %s not removed", f)
		}
	}
}
