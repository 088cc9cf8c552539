package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Data dir layouts a static-pod member can run with (Options.DataDirLayouts),
// as real clusters lay out /var/lib/etcd (docs/recovery.md, "Supported
// layouts").
const (
	// LayoutSubdir: the data dir is a plain dir, <disk>/etcd (kubeadm).
	LayoutSubdir = ""
	// LayoutMountPoint: a filesystem of its own (a tmpfs here) is mounted
	// right at the data dir, as a dedicated etcd disk at /var/lib/etcd.
	LayoutMountPoint = "mount-point"
	// LayoutSymlink: the data dir is a symlink to <disk>/etcd-disk/etcd,
	// as /var/lib/etcd -> a dedicated disk's dir.
	LayoutSymlink = "symlink"
)

// dataDirMountBytes is the size of a LayoutMountPoint tmpfs: room for the
// WAL's preallocated segments, a db and the agent's quarantine of one heal.
const dataDirMountBytes = 1 << 30

// layDataDir makes n's data dir in its layout before etcd first starts.
func (l *Lab) layDataDir(n *Node) error {
	switch n.DataDirLayout {
	case LayoutSubdir:
		return nil
	case LayoutMountPoint:
		if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
			return err
		}
		opts := fmt.Sprintf("size=%d,mode=0700", dataDirMountBytes)
		if err := syscall.Mount("tmpfs", n.DataDir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
			return fmt.Errorf("data dir layout %s: mount -t tmpfs -o %s tmpfs %s: %w (needs root or CAP_SYS_ADMIN)", n.DataDirLayout, opts, n.DataDir, err)
		}
		l.Spec.DiskMounts = append(l.Spec.DiskMounts, n.DataDir)
	case LayoutSymlink:
		if err := os.MkdirAll(n.DataDirTarget(), 0o700); err != nil {
			return err
		}
		if err := os.Symlink(n.DataDirTarget(), n.DataDir); err != nil {
			return fmt.Errorf("data dir layout %s: %w", n.DataDirLayout, err)
		}
	default:
		return fmt.Errorf("node %s: unknown data dir layout %q (want %q, %q or %q)", n.Name, n.DataDirLayout, LayoutSubdir, LayoutMountPoint, LayoutSymlink)
	}
	l.log.Info("laid out data dir", zap.String("node", n.Name), zap.String("layout", n.DataDirLayout), zap.String("dataDir", n.DataDir))
	return nil
}

// DataDirTarget is where a LayoutSymlink data dir's link points.
func (n Node) DataDirTarget() string { return filepath.Join(n.DiskDir, "etcd-disk", "etcd") }

// wipeDataDir removes what etcd keeps in n's data dir. A data dir that is a
// mount point or a symlink keeps its path (a disk wiped by hand, not
// unmounted): its entries go.
func wipeDataDir(n Node) error {
	if n.DataDirLayout == LayoutSubdir {
		return removeAllRacing(n.DataDir)
	}
	entries, err := os.ReadDir(n.DataDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, removeAllRacing(filepath.Join(n.DataDir, e.Name())))
	}
	return errors.Join(errs...)
}

// removeAllRacing removes dir while the agent may put an empty skeleton
// back into it (a wiped serving member's dirs come back at once,
// plan.DecideSkeleton): a RemoveAll racing that fails with "directory not
// empty" (seen in CI: TestAClusterOnDedicatedWALDirs). It tries again, a
// bounded number of times; what the agent puts back after is the agent's.
func removeAllRacing(dir string) error {
	var err error
	for range 50 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond) // the agent's mkdir is done within a few ms
	}
	return fmt.Errorf("remove %s: the agent kept putting it back: %w", dir, err)
}

// MoveWALToDedicatedDir moves a stopped member's WAL to a dedicated
// --wal-dir, as an operator moves a running cluster's WAL to a disk of its
// own (etcd's tuning guide): member/wal is renamed to <disk>/wal/etcd, and
// the stopped manifest (StopMember) gets --wal-dir and a hostPath volume for
// it. StartMember then runs the member on the same WAL.
func (l *Lab) MoveWALToDedicatedDir(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	if n.WALDir != "" {
		return fmt.Errorf("node %s already runs with --wal-dir=%s", node, n.WALDir)
	}
	b, err := os.ReadFile(n.StoppedManifest())
	if err != nil {
		return fmt.Errorf("node %s: its member must be stopped first (StopMember): %w", node, err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return err
	}
	walDir := filepath.Join(n.DiskDir, "wal", "etcd")
	if err := os.MkdirAll(filepath.Dir(walDir), 0o700); err != nil {
		return err
	}
	l.log.Info("fault: move the WAL to a dedicated --wal-dir", zap.String("node", node), zap.String("walDir", walDir))
	if err := os.Rename(filepath.Join(n.DataDir, "member", "wal"), walDir); err != nil {
		return err
	}
	found := false
	for i, c := range pod.Spec.Containers {
		if c.Name == "etcd" {
			pod.Spec.Containers[i].Command = append(c.Command, "--wal-dir="+walDir)
			pod.Spec.Containers[i].VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "etcd-wal", MountPath: filepath.Dir(walDir)})
			found = true
		}
	}
	if !found {
		return fmt.Errorf("node %s: no etcd container in %s", node, n.StoppedManifest())
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "etcd-wal", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: filepath.Dir(walDir), Type: ptr(corev1.HostPathDirectoryOrCreate)}}})
	out, err := yaml.Marshal(&pod)
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.StoppedManifest(), out, 0o644); err != nil {
		return err
	}
	n.WALDir = walDir
	return l.Spec.save()
}
