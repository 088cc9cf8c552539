package localdisk

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestPrunableRule(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	dd := func(h int) QuarantineEntry {
		return QuarantineEntry{Path: "/q/etcd-" + at(h).Format(quarantineStampLayout), Kind: KindDataDir, At: at(h)}
	}
	snap := func(h int) QuarantineEntry {
		return QuarantineEntry{Path: "/q/snapshot-m-" + at(h).Format(SnapshotStampLayout) + ".db", Kind: KindSnapshot, At: at(h)}
	}
	healthy := func(since, now int) PruneState {
		return PruneState{Keep: 2, HealthySince: at(since), Now: at(now), MinHealthy: time.Hour}
	}
	four := []QuarantineEntry{dd(1), dd(2), dd(3), dd(4)}
	for _, tc := range []struct {
		name    string
		entries []QuarantineEntry
		s       PruneState
		want    []QuarantineEntry
	}{
		{"healthy since after all: all but the newest keep, oldest first", four, healthy(5, 7), []QuarantineEntry{dd(1), dd(2)}},
		{"never the newest keep", []QuarantineEntry{dd(1), dd(2)}, healthy(5, 7), nil},
		{"keep per kind", []QuarantineEntry{dd(1), snap(1), dd(2), snap(2), dd(3), snap(3)}, healthy(5, 7), []QuarantineEntry{dd(1), snap(1)}},
		{"keep below 1 still keeps the newest", four, PruneState{Keep: 0, HealthySince: at(5), Now: at(7)}, []QuarantineEntry{dd(1), dd(2), dd(3)}},
		{"never while a recovery is open", four, PruneState{Keep: 2, HealthySince: at(5), Now: at(7), RecoveryOpen: true}, nil},
		{"never when not healthy now", four, PruneState{Keep: 2, Now: at(7)}, nil},
		{"never before the member has been healthy for MinHealthy", four, PruneState{Keep: 2, HealthySince: at(5), Now: at(5).Add(59 * time.Minute), MinHealthy: time.Hour}, nil},
		// The member was last seen unhealthy at 1:59: an entry made after
		// that (2, 3, 4) was not made before the healthy run began.
		{"never an entry newer than the last unhealthy sighting", four, healthy(2, 7), []QuarantineEntry{dd(1)}},
		{"an entry made at the run's start is not before it", four, healthy(1, 7), nil},
		{"never a protected path (the last recovery's copies)", four, PruneState{Keep: 2, HealthySince: at(5), Now: at(7), Protect: []string{dd(1).Path}}, []QuarantineEntry{dd(2)}},
		{"unsorted input", []QuarantineEntry{dd(3), dd(1), dd(4), dd(2)}, healthy(5, 7), []QuarantineEntry{dd(1), dd(2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Prunable(slices.Clone(tc.entries), tc.s)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Prunable = %v, want %v", got, tc.want)
			}
		})
	}
}

// Only this member's copies are listed: not another member's data dirs or
// snapshots (member "etcd" vs "etcd-2"), not seed streams, partial files or
// a person's files.
func TestListQuarantineListsOnlyTheMembersCopies(t *testing.T) {
	root := t.TempDir()
	t1 := time.Date(2026, 11, 30, 5, 20, 9, 438, time.UTC)
	mine := map[string]string{
		"etcd-" + t1.Format(quarantineStampLayout):                KindDataDir,
		"snapshot-etcd-" + t1.Format(SnapshotStampLayout) + ".db": KindSnapshot,
	}
	others := []string{
		"etcd-2-" + t1.Format(quarantineStampLayout), "snapshot-etcd-2-" + t1.Format(SnapshotStampLayout) + ".db",
		"seed-etcd-2026-11-30T05-20-09.438Z.db", "snapshot-etcd-" + t1.Format(SnapshotStampLayout) + ".db.part",
		"notes.txt", "etcd-backup-by-hand",
	}
	for _, n := range append(slices.Collect(maps.Keys(mine)), others...) {
		p := filepath.Join(root, n)
		var err error
		if mine[n] == KindDataDir || n == others[0] || n == others[5] {
			err = os.Mkdir(p, 0o700)
		} else {
			err = os.WriteFile(p, nil, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := ListQuarantine(root, "etcd", "etcd")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(mine) {
		t.Fatalf("listed %v, want %v", got, mine)
	}
	for _, e := range got {
		if mine[filepath.Base(e.Path)] != e.Kind || e.At.Before(t1.Truncate(time.Second)) {
			t.Fatalf("listed %+v", e)
		}
	}
	if got, err := ListQuarantine(filepath.Join(root, "missing"), "etcd", "etcd"); err != nil || got != nil {
		t.Fatalf("missing root: %v, %v", got, err)
	}
}

// RemoveQuarantined deletes an entry of the quarantine and nothing else.
func TestRemoveQuarantinedOnlyInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	q := filepath.Join(root, "q")
	entry := filepath.Join(q, "etcd-x")
	if err := os.MkdirAll(filepath.Join(entry, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(root, "etcd")
	if err := os.Mkdir(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{outside, q, filepath.Join(entry, "member"), filepath.Join(q, "..", "etcd")} {
		if err := RemoveQuarantined(q, QuarantineEntry{Path: p}); err == nil {
			t.Fatalf("removed %s outside the quarantine's entries", p)
		}
	}
	if err := RemoveQuarantined(q, QuarantineEntry{Path: entry}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(entry); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", entry, err)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Fatal(err)
	}
}

// A snapshot's name round-trips through CutSnapshotName, and only member's
// exact names are cut: not member "etcd-2"'s for "etcd", not a name whose
// stamp is cut short or is not a time, not one without ".db".
func TestCutSnapshotNameTakesOnlyTheMembersNames(t *testing.T) {
	t1 := time.Date(2026, 11, 30, 5, 20, 9, 438, time.UTC)
	name := SnapshotName("etcd", t1.In(time.FixedZone("x", 3600)))
	at, rest, ok := CutSnapshotName(name, "etcd")
	if !ok || rest != "" || !at.Equal(t1.Truncate(time.Second)) {
		t.Fatalf("%s: at %v rest %q ok %v", name, at, rest, ok)
	}
	for _, c := range []struct{ name, rest string }{{name + ".part", ".part"}, {name + ".seed.json.tmp-1", ".seed.json.tmp-1"}} {
		if _, rest, ok := CutSnapshotName(c.name, "etcd"); !ok || rest != c.rest {
			t.Errorf("%s: rest %q ok %v, want %q", c.name, rest, ok, c.rest)
		}
	}
	for _, n := range []string{
		SnapshotName("etcd-2", t1), "snapshot-etcd-2026-11-30T05-20.db", "snapshot-etcd-2026-13-30T05-20-09Z.db",
		"snapshot-etcd-" + t1.Format(SnapshotStampLayout), "snapshot-etcd-" + t1.Format(SnapshotStampLayout) + ".d", "seed-etcd-x.db",
	} {
		if _, _, ok := CutSnapshotName(n, "etcd"); ok {
			t.Errorf("%s was cut as member etcd's snapshot", n)
		}
	}
}
