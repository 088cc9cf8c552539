package localdisk

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// quarantineStampLayout is RFC 3339 in UTC with ':' replaced by '-' (unsafe
// in some file names); nanoseconds keep two quarantines in one second apart.
// Its fixed width lets QuarantineOverflow find the stamp at the name's end.
const quarantineStampLayout = "2006-01-02T15-04-05.000000000Z"

// QuarantineDataDir moves dataDir to quarantineRoot/<basename>-<UTC stamp>
// and returns the new path. It never deletes anything.
//
// The move is a rename, so it is atomic and instant, and it is refused when
// quarantineRoot is on another filesystem (a rename cannot cross one and a
// copy would be neither). Also refused: dataDir being a mount point (cannot
// be renamed) and quarantineRoot lying inside dataDir. quarantineRoot is
// created if missing. Parent directories are fsynced so the move survives a
// crash.
func QuarantineDataDir(dataDir, quarantineRoot string, now time.Time) (string, error) {
	return QuarantineAs(dataDir, quarantineRoot, filepath.Base(filepath.Clean(dataDir)), now)
}

// QuarantineAs is QuarantineDataDir naming the copy <name>-<UTC stamp>.
func QuarantineAs(dataDir, quarantineRoot, name string, now time.Time) (string, error) {
	src, err := filepath.Abs(dataDir)
	if err != nil {
		return "", err
	}
	root, err := filepath.Abs(quarantineRoot)
	if err != nil {
		return "", err
	}
	if isWithin(root, src) {
		return "", fmt.Errorf("quarantine root %s is inside data dir %s", root, src)
	}

	srcInfo, err := os.Lstat(src)
	if err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	parentInfo, err := os.Stat(filepath.Dir(src))
	if err != nil {
		return "", fmt.Errorf("data dir parent: %w", err)
	}
	if deviceOf(parentInfo) != deviceOf(srcInfo) {
		return "", fmt.Errorf("data dir %s is a mount point and cannot be renamed", src)
	}

	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("create quarantine root: %w", err)
	}
	rootInfo, err := os.Stat(root)
	if err != nil {
		return "", fmt.Errorf("quarantine root: %w", err)
	}
	if deviceOf(rootInfo) != deviceOf(srcInfo) {
		return "", fmt.Errorf("quarantine root %s (device %d) is not on the same filesystem as data dir %s (device %d); refusing to move data across filesystems",
			root, deviceOf(rootInfo), src, deviceOf(srcInfo))
	}

	dst := filepath.Join(root, name+"-"+now.UTC().Format(quarantineStampLayout))
	// rename(2) silently replaces an empty directory; never clobber anything.
	if _, err := os.Lstat(dst); err == nil {
		return "", fmt.Errorf("quarantine target %s already exists", dst)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("quarantine target: %w", err)
	}
	if err := os.Rename(src, dst); err != nil {
		return "", err
	}

	// root's parent too: root may have just been created.
	for _, dir := range []string{filepath.Dir(src), root, filepath.Dir(root)} {
		if err := syncDir(dir); err != nil {
			return dst, fmt.Errorf("moved to %s but fsync of %s failed: %w", dst, dir, err)
		}
	}
	return dst, nil
}

// QuarantineOverflow lists, newest first, the quarantined data dirs in
// quarantineRoot beyond the newest keep, so a caller can report them.
// Nothing is deleted. Entries not named by QuarantineDataDir are ignored; a
// missing quarantineRoot has no overflow.
func QuarantineOverflow(quarantineRoot string, keep int) ([]string, error) {
	entries, err := os.ReadDir(quarantineRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}

	type stamped struct {
		name string
		at   time.Time
	}
	var found []stamped
	for _, e := range entries {
		if at, ok := quarantineStamp(e.Name()); ok {
			found = append(found, stamped{e.Name(), at})
		}
	}
	sort.Slice(found, func(i, j int) bool {
		if !found[i].at.Equal(found[j].at) {
			return found[i].at.After(found[j].at)
		}
		return found[i].name > found[j].name
	})

	keep = max(keep, 0)
	if len(found) <= keep {
		return nil, nil
	}
	overflow := make([]string, 0, len(found)-keep)
	for _, s := range found[keep:] {
		overflow = append(overflow, filepath.Join(quarantineRoot, s.name))
	}
	return overflow, nil
}

// quarantineStamp parses the "-<stamp>" suffix QuarantineDataDir appends.
func quarantineStamp(name string) (time.Time, bool) {
	n := len(quarantineStampLayout)
	if len(name) < n+2 || name[len(name)-n-1] != '-' {
		return time.Time{}, false
	}
	at, err := time.Parse(quarantineStampLayout, name[len(name)-n:])
	return at, err == nil
}

func isWithin(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

func deviceOf(fi os.FileInfo) uint64 {
	return uint64(fi.Sys().(*syscall.Stat_t).Dev)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// BackupsHint says where a person finds the newest snapshot the agent kept
// (the pre-change backups, snapshot-*.db in the quarantine), for refusals
// that leave a restore to them.
func BackupsHint(quarantineRoot string) string {
	paths, _ := filepath.Glob(filepath.Join(quarantineRoot, "snapshot-*.db"))
	newest, at := "", time.Time{}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.ModTime().After(at) {
			newest, at = p, fi.ModTime()
		}
	}
	if newest == "" {
		return "no snapshot in the quarantine " + quarantineRoot + " (use your own backups)"
	}
	return fmt.Sprintf("newest snapshot kept by the agent: %s (%s), quarantine %s", newest, at.UTC().Format(time.RFC3339), quarantineRoot)
}

// SameFilesystem reports whether a and b are on one filesystem (a rename
// between them works); false when either cannot be stat'ed.
func SameFilesystem(a, b string) bool {
	ai, err := os.Stat(a)
	if err != nil {
		return false
	}
	bi, err := os.Stat(b)
	return err == nil && deviceOf(ai) == deviceOf(bi)
}

// VolumeQuarantineDirName is the quarantine inside a data dir that is a
// volume's root (QuarantineMemberDir).
const VolumeQuarantineDirName = "etcd-agent-quarantine"

// QuarantineMemberDir sets aside the member data of a data dir that is a
// volume's root (a mount point or a PV's path), which is never renamed: its
// member/ dir, all etcd reads of it, is renamed into
// <dataDir>/etcd-agent-quarantine/member-<UTC stamp>, on the same volume.
// Other entries (lost+found) stay. Nothing is deleted.
func QuarantineMemberDir(dataDir string, now time.Time) (string, error) {
	return QuarantineDataDir(filepath.Join(dataDir, memberDirName), filepath.Join(dataDir, VolumeQuarantineDirName), now)
}

// HasMemberDir reports whether dataDir holds a member/ entry: the etcd data
// a volume root's quarantine sets aside.
func HasMemberDir(dataDir string) bool {
	_, err := os.Lstat(filepath.Join(dataDir, memberDirName))
	return err == nil
}
