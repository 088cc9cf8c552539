package localdisk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kinds of quarantined entries (QuarantineEntry.Kind).
const (
	// KindDataDir: a data dir renamed by QuarantineDataDir,
	// <data dir's basename>-<quarantineStampLayout>.
	KindDataDir = "data-dir"
	// KindSnapshot: a pre-change backup snapshot,
	// snapshot-<member>-<snapshotStampLayout>.db.
	KindSnapshot = "snapshot"
	// KindWALDir: a dedicated WAL dir set aside by the stop,
	// wal-<its basename>-<quarantineStampLayout> (in the quarantine, or
	// beside the WAL dir on a filesystem of its own).
	KindWALDir = "wal-dir"
	// KindMemberDir: the member/ of a data dir kept in place (a volume's
	// root, a symlink), member-<quarantineStampLayout> in
	// <data dir>/etcd-agent-quarantine (QuarantineMemberDir).
	KindMemberDir = "member-dir"
)

// SnapshotStampLayout is the time in a pre-change snapshot's name (UTC).
const SnapshotStampLayout = "2006-01-02T15-04-05Z"

// QuarantineEntry is one quarantined copy of a member's data.
type QuarantineEntry struct {
	Path string
	// Root is the quarantine it was listed in (RemoveQuarantined's guard).
	Root string
	Kind string
	// At is when the copy was made: the later of its name's stamp and its
	// modification time (a stream finishes after its name was stamped).
	At time.Time
}

// ListQuarantine lists the member's entries in root: data dirs named
// exactly <dataDirBase>-<stamp> and snapshots named exactly
// snapshot-<member>-<stamp>.db. Anything else (another member's copies,
// seed streams, partial files, a person's files) is not listed, so never
// pruned. A missing root lists nothing.
func ListQuarantine(root, dataDirBase, member string) ([]QuarantineEntry, error) {
	out, err := ListCopies(root, dataDirBase, KindDataDir)
	if err != nil {
		return nil, err
	}
	des, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		at, rest, found := CutSnapshotName(de.Name(), member)
		if !found || rest != "" || !de.Type().IsRegular() {
			continue
		}
		out = append(out, entryOf(root, de, KindSnapshot, at))
	}
	return out, nil
}

// entryOf is the entry of de in root, made at the later of at and its
// modification time (a stream finishes after its name was stamped).
func entryOf(root string, de os.DirEntry, kind string, at time.Time) QuarantineEntry {
	if fi, err := de.Info(); err == nil && fi.ModTime().After(at) {
		at = fi.ModTime()
	}
	return QuarantineEntry{Path: filepath.Join(root, de.Name()), Root: root, Kind: kind, At: at.UTC()}
}

// ListCopies lists the dirs in root named exactly <prefix>-<stamp> (the
// names QuarantineAs gives), as entries of kind. Anything else is not
// listed, so never pruned. A missing root lists nothing.
func ListCopies(root, prefix, kind string) ([]QuarantineEntry, error) {
	des, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []QuarantineEntry
	for _, de := range des {
		rest, found := strings.CutPrefix(de.Name(), prefix+"-")
		if !found || !de.IsDir() {
			continue
		}
		if at, ok := parseStamp(quarantineStampLayout, rest); ok {
			out = append(out, entryOf(root, de, kind, at))
		}
	}
	return out, nil
}

// SnapshotName is the file name of member's pre-change snapshot taken at
// t: snapshot-<member>-<SnapshotStampLayout>.db.
func SnapshotName(member string, t time.Time) string {
	return "snapshot-" + member + "-" + t.UTC().Format(SnapshotStampLayout) + ".db"
}

// CutSnapshotName: name begins with a name SnapshotName gives member; at
// is its stamp and rest what follows it ("" for the snapshot itself,
// ".part" for its stream's part file). Member "etcd" never takes member
// "etcd-2"'s ("snapshot-etcd-2-2026-..." has no stamp after "snapshot-etcd-").
func CutSnapshotName(name, member string) (at time.Time, rest string, ok bool) {
	s, ok := strings.CutPrefix(name, "snapshot-"+member+"-")
	if !ok || len(s) < len(SnapshotStampLayout) {
		return time.Time{}, "", false
	}
	if at, ok = parseStamp(SnapshotStampLayout, s[:len(SnapshotStampLayout)]); !ok {
		return time.Time{}, "", false
	}
	rest, ok = strings.CutPrefix(s[len(SnapshotStampLayout):], ".db")
	if !ok {
		return time.Time{}, "", false
	}
	return at, rest, true
}

func parseStamp(layout, s string) (time.Time, bool) {
	if len(s) != len(layout) {
		return time.Time{}, false
	}
	at, err := time.Parse(layout, s)
	return at, err == nil
}

// PruneState is what the pruning rule looks at.
type PruneState struct {
	// Keep is --quarantine-keep: the newest Keep entries of each kind are
	// never pruned (at least 1 is always kept).
	Keep int
	// RecoveryOpen: a recovery of the member is open (its journal is
	// active): nothing is pruned while one is.
	RecoveryOpen bool
	// HealthySince is the start of the member's current continuous healthy
	// run (the tracker's verdict healthy, quorum held, no recovery since);
	// zero when it is not healthy now.
	HealthySince time.Time
	// Now and MinHealthy: the run must have lasted MinHealthy by Now.
	Now        time.Time
	MinHealthy time.Duration
	// Protect are paths never pruned whatever their age (the copies the
	// last recovery's journal names).
	Protect []string
}

// Prunable is the quarantine's pruning rule (pure): the entries that are
// provably redundant and may be deleted, oldest first. An entry may be
// pruned only when all of these hold:
//   - no recovery is open;
//   - the member is healthy now, and has been for MinHealthy;
//   - the entry was made before the healthy run began (the member has been
//     healthy since it was made: an entry newer than the last time the
//     member was seen unhealthy is never pruned);
//   - it is not among the newest Keep of its kind (data dirs, snapshots),
//     nor one of the Protect paths.
func Prunable(entries []QuarantineEntry, s PruneState) []QuarantineEntry {
	if s.RecoveryOpen || s.HealthySince.IsZero() || s.Now.Sub(s.HealthySince) < s.MinHealthy {
		return nil
	}
	keep := max(s.Keep, 1)
	byKind := map[string][]QuarantineEntry{}
	for _, e := range entries {
		byKind[e.Kind] = append(byKind[e.Kind], e)
	}
	var out []QuarantineEntry
	for _, es := range byKind {
		sort.Slice(es, func(i, j int) bool {
			if !es[i].At.Equal(es[j].At) {
				return es[i].At.After(es[j].At)
			}
			return es[i].Path > es[j].Path
		})
		for _, e := range es[min(keep, len(es)):] {
			if e.At.Before(s.HealthySince) && !slices.Contains(s.Protect, e.Path) {
				out = append(out, e)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.Before(out[j].At)
		}
		return out[i].Path < out[j].Path
	})
	return out
}

// RemoveQuarantined deletes one entry of root: the only deletion the agent
// ever makes. It refuses a path that is not directly inside root.
func RemoveQuarantined(root string, e QuarantineEntry) error {
	r, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	p, err := filepath.Abs(e.Path)
	if err != nil {
		return err
	}
	if filepath.Dir(p) != r || p == r {
		return fmt.Errorf("%s is not an entry of the quarantine %s", e.Path, root)
	}
	if err := os.RemoveAll(p); err != nil {
		return err
	}
	return syncDir(r)
}
