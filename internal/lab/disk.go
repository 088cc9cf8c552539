package lab

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"go.uber.org/zap"
)

// BallastFile is the file FillDisk writes in a node's DiskDir: a name no
// etcd data dir file can have.
const BallastFile = ".lab-ballast"

// mountDisk makes n's (still empty) DiskDir a tmpfs of the lab's DiskLimit.
// When this process may not mount, it records why and the lab runs on plain
// folders (DiskFaultsAvailable tells).
func (l *Lab) mountDisk(n Node) error {
	s := l.Spec
	if s.DiskLimit == 0 || s.DiskFaultsUnavailable != "" {
		return nil
	}
	if ok, err := isTmpfsMount(n.DiskDir); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("%s is a tmpfs mount already", n.DiskDir)
	}
	if entries, err := os.ReadDir(n.DiskDir); err != nil {
		return err
	} else if len(entries) > 0 {
		return fmt.Errorf("%s is not empty: a disk is mounted before anything is written there", n.DiskDir)
	}
	opts := fmt.Sprintf("size=%d,mode=0755", s.DiskLimit)
	if err := syscall.Mount("tmpfs", n.DiskDir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		s.DiskFaultsUnavailable = fmt.Sprintf("mount -t tmpfs -o %s tmpfs %s: %v (needs root or CAP_SYS_ADMIN)", opts, n.DiskDir, err)
		l.log.Warn("disk faults unavailable: nodes' disks are plain folders", zap.String("reason", s.DiskFaultsUnavailable))
		return nil
	}
	s.DiskMounts = append(s.DiskMounts, n.DiskDir)
	l.log.Info("mounted node disk", zap.String("node", n.Name), zap.String("dir", n.DiskDir), zap.Int64("bytes", s.DiskLimit))
	return nil
}

// unmountDisk unmounts path if the lab mounted it, lazily when lazy is set
// or when it is busy, and forgets it.
func (l *Lab) unmountDisk(path string, lazy bool) error {
	s := l.Spec
	if !slices.Contains(s.DiskMounts, path) {
		return nil
	}
	if ok, err := isTmpfsMount(path); err != nil {
		return err
	} else if ok {
		var err error = syscall.EBUSY
		if !lazy {
			err = syscall.Unmount(path, 0)
		}
		if errors.Is(err, syscall.EBUSY) {
			l.log.Warn("disk busy: lazy unmount", zap.String("dir", path))
			err = syscall.Unmount(path, syscall.MNT_DETACH)
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	s.DiskMounts = slices.DeleteFunc(s.DiskMounts, func(p string) bool { return p == path })
	return s.save()
}

// unmountDisks unmounts every disk the lab mounted (lazily when lab
// processes survived Down and may hold them).
func (l *Lab) unmountDisks(lazy bool) error {
	var errs []error
	mounts := slices.Clone(l.Spec.DiskMounts)
	slices.Reverse(mounts) // a data dir's mount inside a node's disk first
	for _, p := range mounts {
		errs = append(errs, l.unmountDisk(p, lazy))
	}
	return errors.Join(errs...)
}

// isTmpfsMount reports whether path is a tmpfs mount point of this mount
// namespace (the lab's processes share it).
func isTmpfsMount(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	path = filepath.Clean(path)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if !ok || len(fields) < 5 {
			continue
		}
		if unescapeMountPath(fields[4]) == path && strings.HasPrefix(post, "tmpfs ") {
			return true, nil
		}
	}
	return false, sc.Err()
}

// MountedDisks lists the lab's tmpfs disks that are mounted now (for tests:
// none after Down).
func (l *Lab) MountedDisks() ([]string, error) {
	var out []string
	for _, n := range l.Spec.Nodes {
		ok, err := isTmpfsMount(n.DiskDir)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, n.DiskDir)
		}
	}
	return out, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// DiskFaultsAvailable says whether FillDisk works in this lab, and if not why.
func (l *Lab) DiskFaultsAvailable() (bool, string) {
	switch {
	case l.Spec.DiskLimit == 0:
		return false, "the lab has no size-limited disks (Options.DiskLimit is 0)"
	case l.Spec.DiskFaultsUnavailable != "":
		return false, l.Spec.DiskFaultsUnavailable
	case len(l.Spec.DiskMounts) == 0:
		return false, "the lab's disks are not mounted (any more)"
	}
	return true, ""
}

// nodeDisk returns node's DiskDir if it is a tmpfs the lab mounted.
func (l *Lab) nodeDisk(node string) (string, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return "", err
	}
	if ok, why := l.DiskFaultsAvailable(); !ok {
		return "", fmt.Errorf("no disk faults in this lab: %s", why)
	}
	mounted, err := isTmpfsMount(n.DiskDir)
	if err != nil {
		return "", err
	}
	if !slices.Contains(l.Spec.DiskMounts, n.DiskDir) || !mounted {
		return "", fmt.Errorf("node %s: %s is not a tmpfs the lab mounted", node, n.DiskDir)
	}
	return n.DiskDir, nil
}

// FillDisk fills node's disk (a tmpfs of DiskLimit bytes) with a ballast
// file until a write fails with ENOSPC; what runs there then finds no room.
// A fill that fails takes its ballast back: a fault not made leaves nothing.
func (l *Lab) FillDisk(node string) (err error) {
	dir, err := l.nodeDisk(node)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, BallastFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	defer func() {
		if err != nil {
			_ = os.Remove(path)
		}
	}()
	var written int64
	full := false
	for _, chunk := range []int{1 << 20, 4 << 10} {
		buf := make([]byte, chunk)
		for i := range buf {
			buf[i] = 0xB1 // not zero: a tmpfs stores every page written
		}
		for range l.Spec.DiskLimit/int64(chunk) + 2 {
			n, err := f.Write(buf)
			written += int64(n)
			if errors.Is(err, syscall.ENOSPC) {
				full = true
				break
			}
			if err != nil {
				return fmt.Errorf("fill %s: %w", path, err)
			}
		}
	}
	l.log.Info("fault: fill disk", zap.String("node", node), zap.String("file", path), zap.Int64("bytes", written))
	if !full {
		return fmt.Errorf("fill %s: wrote %d bytes and no ENOSPC", path, written)
	}
	return nil
}

// FreeDisk removes the ballast FillDisk wrote.
func (l *Lab) FreeDisk(node string) error {
	dir, err := l.nodeDisk(node)
	if err != nil {
		return err
	}
	l.log.Info("fault: free disk", zap.String("node", node))
	if err := os.Remove(filepath.Join(dir, BallastFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
