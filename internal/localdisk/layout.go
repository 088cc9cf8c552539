package localdisk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Paths inside a data dir, as laid out by etcd (member/wal, member/snap/db).
// With a dedicated --wal-dir the WAL lives there instead (Dirs.WAL).
const (
	memberDirName = "member"
	walRelPath    = "member/wal"
	snapRelPath   = "member/snap"
	dbRelPath     = "member/snap/db"
)

// ClassifyLayout is the cheap check: it only stats paths and lists
// directories, never opening the db or WAL files, so it is safe to call while
// the member runs (e.g. on every fsnotify event).
//
// It returns ClassMissing, ClassEmpty, ClassCorrupt (layout broken, or the
// agent's marked skeleton of a wiped member: SkeletonMarkerName) or
// ClassOK (layout only; contents unverified). While a brand-new member
// bootstraps, etcd creates member/snap/db before member/wal, so a layout
// verdict of corrupt can be transient in that window; confirm with Classify
// (which then reports in-use) before acting on it.
//
// With a dedicated WAL dir (d.WAL) both dirs are read: a missing or empty
// data dir is only missing or empty when the WAL dir holds no .wal file
// either (the WAL alone is the member's state, half gone: corrupt, never a
// dir a new member may start in), and member data needs its WAL there.
func ClassifyLayout(d Dirs) Result {
	r := classifyDataDirLayout(d)
	if !d.DedicatedWAL() || (r.Class != ClassMissing && r.Class != ClassEmpty) {
		return r
	}
	switch segs, err := walSegments(d.WAL); {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return corruptf("%s; list the WAL dir %s: %v", r.Detail, d.WAL, err)
	case len(segs) > 0:
		return corruptf("%s, but the WAL dir %s holds .wal files (%s): the member's state is half gone",
			r.Detail, d.WAL, strings.Join(segs[:min(len(segs), 3)], ", "))
	}
	r.Detail += fmt.Sprintf("; WAL dir %s holds no .wal file", d.WAL)
	return r
}

// classifyDataDirLayout is ClassifyLayout's check of the data dir, whose
// member data's WAL is d.WALDir().
func classifyDataDirLayout(d Dirs) Result {
	dataDir := d.Data
	fi, err := os.Stat(dataDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Result{Class: ClassMissing, Detail: fmt.Sprintf("data dir %s does not exist", dataDir)}
	case err != nil:
		// Unreadable counts as corrupt: etcd could not start from it either.
		return corruptf("stat data dir: %v", err)
	case !fi.IsDir():
		// No member data, and no db lock to check: a class of its own (issue 38).
		return Result{Class: ClassNotADirectory, Detail: fmt.Sprintf("data dir %s is not a directory (mode %s)", dataDir, fi.Mode())}
	}

	entries, err := os.ReadDir(dataDir)
	if err != nil {
		return corruptf("list data dir %s: %v", dataDir, err)
	}
	if len(entries) == 0 {
		return Result{Class: ClassEmpty, Detail: fmt.Sprintf("data dir %s has no entries", dataDir)}
	}

	memberDir := filepath.Join(dataDir, memberDirName)
	fi, err = os.Stat(memberDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// etcd only looks at member/; anything else (lost+found on a fresh
		// volume, stray files) is ignored and a new member would start here.
		return Result{Class: ClassEmpty, Detail: fmt.Sprintf(
			"data dir %s has no %s dir; ignoring other entries: %s", dataDir, memberDirName, entryNames(entries))}
	case err != nil:
		return corruptf("stat %s: %v", memberDir, err)
	case !fi.IsDir():
		return corruptf("%s is not a directory", memberDir)
	}
	if skeletonMarked(dataDir) {
		// The agent's skeleton of a wiped member: never a member's state,
		// whatever etcd wrote into it since (plan.DecideSkeleton).
		return skeletonResult(dataDir)
	}

	memberEntries, err := os.ReadDir(memberDir)
	if err != nil {
		return corruptf("list %s: %v", memberDir, err)
	}
	if len(memberEntries) == 0 {
		// etcd starts a new member in it, whatever else the dir holds (a
		// volume root's quarantine, lost+found).
		return Result{Class: ClassEmpty, Detail: fmt.Sprintf("data dir %s has an empty %s dir; ignoring other entries", dataDir, memberDirName)}
	}

	if r, ok := checkWALDirLayout(d.WALDir()); !ok {
		return r
	}
	if r, ok := checkDBLayout(filepath.Join(dataDir, dbRelPath)); !ok {
		return r
	}
	return Result{Class: ClassOK, Detail: fmt.Sprintf("layout of %s ok (contents not verified)", dataDir)}
}

// checkWALDirLayout requires member/wal to be a directory holding at least
// one .wal segment; ok is false with a corrupt Result otherwise.
func checkWALDirLayout(walDir string) (Result, bool) {
	segs, err := walSegments(walDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return corruptf("%s is missing while the member dir exists", walDir), false
	case err != nil:
		return corruptf("list %s: %v", walDir, err), false
	case len(segs) == 0:
		return corruptf("%s has no .wal files", walDir), false
	}
	return Result{}, true
}

// walSegments lists the regular .wal files in walDir (etcd's wal.Exist
// looks for the same).
func walSegments(walDir string) ([]string, error) {
	entries, err := os.ReadDir(walDir)
	if err != nil {
		return nil, err
	}
	var segs []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".wal") && e.Type().IsRegular() {
			segs = append(segs, e.Name())
		}
	}
	return segs, nil
}

// checkDBLayout requires member/snap/db to be a regular file.
func checkDBLayout(dbPath string) (Result, bool) {
	fi, err := os.Stat(dbPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return corruptf("%s is missing while the member dir exists", dbPath), false
	case err != nil:
		return corruptf("stat %s: %v", dbPath, err), false
	case !fi.Mode().IsRegular():
		return corruptf("%s is not a regular file (mode %s)", dbPath, fi.Mode()), false
	case fi.Size() == 0:
		// bbolt would try to initialise a zero-length file; it holds no data either way.
		return corruptf("%s is empty (0 bytes)", dbPath), false
	}
	return Result{}, true
}

func entryNames(entries []os.DirEntry) string {
	const limit = 5
	names := make([]string, 0, limit)
	for i, e := range entries {
		if i == limit {
			names = append(names, fmt.Sprintf("... (%d more)", len(entries)-limit))
			break
		}
		names = append(names, e.Name())
	}
	return strings.Join(names, ", ")
}

func corruptf(format string, args ...any) Result {
	return Result{Class: ClassCorrupt, Detail: fmt.Sprintf(format, args...)}
}
