package localdisk

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
)

// SkeletonMarkerName is the file the agent puts into member/ when it makes
// the empty directory skeleton of a data dir that was wiped while its member
// runs (plan.DecideSkeleton). etcd never reads or removes other entries of
// member/, and the marker moves with member/ whenever the dir is set aside
// (a volume root's member/ is), so a marked dir is classed corrupt whatever
// etcd writes into it afterwards: never ok, never empty.
const SkeletonMarkerName = "etcd-agent-skeleton"

// SkeletonMarker is the marker's path for a data dir.
func SkeletonMarker(dataDir string) string {
	return filepath.Join(dataDir, memberDirName, SkeletonMarkerName)
}

// skeletonMarked reports whether dataDir's member/ holds the marker (any
// kind of entry by that name counts: the safe side).
func skeletonMarked(dataDir string) bool {
	_, err := os.Lstat(SkeletonMarker(dataDir))
	return err == nil
}

// skeletonResult is the class of a marked data dir.
func skeletonResult(dataDir string) Result {
	var m SkeletonMark
	b, _ := os.ReadFile(SkeletonMarker(dataDir))
	why := ""
	if json.Unmarshal(b, &m) == nil && m.MemberID != "" {
		why = fmt.Sprintf(" at %s for member %s", m.MadeAt, m.MemberID)
	}
	return corruptf("data dir %s is the empty skeleton the agent made%s (%s) while the member served from the files of its wiped data dir: "+
		"whatever etcd wrote into it since (.snap files, a defragmented or received db) is no state a member can restart from (no WAL, no raft hard state); "+
		"it is never started on: the member is replaced by a rejoin", dataDir, why, SkeletonMarker(dataDir))
}

// SkeletonMark is what the marker says (for a person; only its presence
// counts).
type SkeletonMark struct {
	MadeAt    string   `json:"madeAt"`
	Member    string   `json:"member"`
	MemberID  string   `json:"memberID"`
	ClusterID string   `json:"clusterID,omitempty"`
	Made      []string `json:"made"`
	Why       string   `json:"why"`
}

// SkeletonLook is what LookSkeleton saw of a member's dirs.
type SkeletonLook struct {
	DataDir, DataDirNotDir, DataDirParent bool
	MemberDir, SnapDir, DB                bool
	WALDir, WALDirParent                  bool
	Marked                                bool
	// Err: a path could not be looked at (anything but "not there").
	Err error
}

// SkeletonParts are the dirs of a member's skeleton, in the order they are made.
type SkeletonParts struct {
	DataDir, MemberDir, SnapDir, WALDir, Marker string
}

// SkeletonPartsOf names d's skeleton on the node.
func SkeletonPartsOf(d Dirs) SkeletonParts {
	return SkeletonParts{DataDir: d.Data, MemberDir: filepath.Join(d.Data, memberDirName), SnapDir: filepath.Join(d.Data, snapRelPath),
		WALDir: d.WALDir(), Marker: SkeletonMarker(d.Data)}
}

// LookSkeleton stats the paths of d's skeleton (never lists, never opens:
// cheap, and safe while etcd runs).
func LookSkeleton(d Dirs) SkeletonLook {
	p := SkeletonPartsOf(d)
	var l SkeletonLook
	isDir := func(path string) bool {
		fi, err := os.Stat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			l.Err = errors.Join(l.Err, err)
		}
		return err == nil && fi.IsDir()
	}
	exists := func(path string) bool {
		_, err := os.Lstat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			l.Err = errors.Join(l.Err, err)
		}
		return err == nil
	}
	l.DataDir = isDir(p.DataDir)
	l.DataDirNotDir = !l.DataDir && exists(p.DataDir)
	l.DataDirParent = isDir(filepath.Dir(filepath.Clean(p.DataDir)))
	l.MemberDir, l.SnapDir = isDir(p.MemberDir), isDir(p.SnapDir)
	l.DB = exists(filepath.Join(d.Data, dbRelPath))
	l.WALDir = isDir(p.WALDir)
	l.WALDirParent = isDir(filepath.Dir(filepath.Clean(p.WALDir)))
	l.Marked = exists(p.Marker)
	return l
}

// SkeletonMake says which parts RestoreSkeleton makes.
type SkeletonMake struct {
	DataDir, MemberDir, Marker, SnapDir, WALDir bool
}

// RestoreSkeleton makes the parts mk names, and only those, in this order:
// the data dir, member/, the marker (written whole and synced before any
// dir etcd's purge lists exists, so an interrupted restore never leaves an
// unmarked skeleton), member/snap, the WAL dir. Dirs are made one level at
// a time (never a missing parent: plan.DecideSkeleton checked them), mode
// 0700 as etcd makes them, owned as the nearest existing dir above them (a
// non-root etcd must list them). A part that appeared meanwhile is left as
// it is. Nothing is ever removed. made lists what was created, also on error.
func RestoreSkeleton(d Dirs, mk SkeletonMake, mark SkeletonMark) (made []string, err error) {
	p := SkeletonPartsOf(d)
	mkdir := func(dir string) error {
		owner, oerr := os.Stat(filepath.Dir(filepath.Clean(dir)))
		if oerr != nil {
			return oerr
		}
		switch err := os.Mkdir(dir, 0o700); {
		case errors.Is(err, fs.ErrExist):
			// Appeared meanwhile: fine if a dir; a file or a dangling link
			// there is not a skeleton made (review: "restored" was said).
			if fi, serr := os.Stat(dir); serr != nil || !fi.IsDir() {
				return fmt.Errorf("%s exists and is not a directory", dir)
			}
			return nil
		case err != nil:
			return err
		}
		made = append(made, dir)
		if err := chownLike(dir, owner); err != nil {
			return err
		}
		return fsutil.SyncDir(filepath.Dir(filepath.Clean(dir)))
	}
	if mk.DataDir {
		if err := mkdir(p.DataDir); err != nil {
			return made, err
		}
	}
	if mk.MemberDir {
		if err := mkdir(p.MemberDir); err != nil {
			return made, err
		}
	}
	if mk.Marker {
		mark.Made = append(append([]string(nil), made...), p.Marker)
		if mk.SnapDir {
			mark.Made = append(mark.Made, p.SnapDir)
		}
		if mk.WALDir {
			mark.Made = append(mark.Made, p.WALDir)
		}
		created, err := writeMarker(p.Marker, mark)
		if created {
			made = append(made, p.Marker)
		}
		if err != nil {
			return made, err
		}
	}
	if mk.SnapDir {
		if err := mkdir(p.SnapDir); err != nil {
			return made, err
		}
	}
	if mk.WALDir {
		if err := mkdir(p.WALDir); err != nil {
			return made, err
		}
	}
	return made, nil
}

// writeMarker creates the marker (never over an existing one: a marker
// already there is enough) and syncs it and member/. A write that fails
// half-way leaves a marker all the same: its presence is what counts.
func writeMarker(path string, mark SkeletonMark) (created bool, err error) {
	b, err := json.MarshalIndent(mark, "", "  ")
	if err != nil {
		return false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	if err := errors.Join(werr, serr, f.Close()); err != nil {
		return true, fmt.Errorf("write the skeleton marker %s: %w", path, err)
	}
	return true, fsutil.SyncDir(filepath.Dir(path))
}

// chownLike gives path the owner and group of like, when this process may
// (root) and they differ.
func chownLike(path string, like os.FileInfo) error {
	st, ok := like.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 || (int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid()) {
		return nil
	}
	return os.Lchown(path, int(st.Uid), int(st.Gid))
}
