package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// Data dir layouts a hosted etcd StatefulSet can run with
// (Options.HostedLayouts), as charts and operators lay out the claim
// (docs/recovery.md, "Supported layouts").
const (
	// HostedLayoutSubdir: --data-dir=/var/lib/etcd/data, a subdir of the
	// claim mounted at /var/lib/etcd (HyperShift, etcd-druid).
	HostedLayoutSubdir = ""
	// HostedLayoutVolumeRoot: --data-dir=/var/lib/etcd, the claim's own
	// mount: the data dir is the PV's path.
	HostedLayoutVolumeRoot = "volume-root"
	// HostedLayoutSubPathWALDir: the claim mounted twice, at /var/lib/etcd
	// and with subPath data at /var/lib/etcd-data; --data-dir is that
	// subPath mount's root and --wal-dir=/var/lib/etcd/wal is a dir of the
	// same claim (a WAL dir of its own, never at a mount root).
	HostedLayoutSubPathWALDir = "subpath-wal-dir"
	// HostedLayoutSymlink: --data-dir=/var/lib/etcd/data, where data is a
	// symlink to data-v1 on the same claim, as a chart's migration leaves
	// it (an init container makes the link once; a re-created pod finds
	// it there).
	HostedLayoutSymlink = "symlink"
)

// hostedSymlinkTarget is where HostedLayoutSymlink's data link points, on
// the claim (a relative link: the same on the node and in the container).
const hostedSymlinkTarget = "data-v1"

// hostedSubPathDataMount is where HostedLayoutSubPathWALDir mounts the
// claim's data subPath.
const hostedSubPathDataMount = "/var/lib/etcd-data"

// hostedLayout is the layout of hosted cluster ns.
func (l *Lab) hostedLayout(ns string) string {
	if l.Spec.Management == nil {
		return HostedLayoutSubdir
	}
	return l.Spec.Management.HostedLayouts[ns]
}

// layHostedPod sets the data dir (and WAL dir) flags and mounts of the
// hosted StatefulSet's etcd container for its cluster's layout.
func layHostedPod(layout string, args []string, mounts []corev1.VolumeMount) ([]string, []corev1.VolumeMount, error) {
	switch layout {
	case HostedLayoutSubdir:
		return append(args, "--data-dir="+hostedDataMountPath+"/data"), mounts, nil
	case HostedLayoutVolumeRoot:
		return append(args, "--data-dir="+hostedDataMountPath), mounts, nil
	case HostedLayoutSubPathWALDir:
		mounts = append(mounts, corev1.VolumeMount{Name: "data", MountPath: hostedSubPathDataMount, SubPath: "data"})
		return append(args, "--data-dir="+hostedSubPathDataMount, "--wal-dir="+hostedDataMountPath+"/wal"), mounts, nil
	case HostedLayoutSymlink:
		return append(args, "--data-dir="+hostedDataMountPath+"/data"), mounts, nil
	}
	return nil, nil, fmt.Errorf("unknown hosted layout %q (want %q, %q, %q or %q)", layout, HostedLayoutSubdir, HostedLayoutVolumeRoot, HostedLayoutSubPathWALDir, HostedLayoutSymlink)
}

// hostedInitContainers are the init containers the layout needs before
// etcd starts: HostedLayoutSymlink's makes the data link (only when the
// path is free: a re-created pod keeps what is there). The paths are in
// env values, which the lab kubelet maps to the node as it maps flags.
func hostedInitContainers(layout string, mounts []corev1.VolumeMount, image string) []corev1.Container {
	if layout != HostedLayoutSymlink {
		return nil
	}
	return []corev1.Container{{
		Name: "data-link", Image: image,
		Command: []string{"/bin/sh", "-c", `mkdir -p "$TARGET" && { [ -e "$LINK" ] || [ -L "$LINK" ] || ln -s ` + hostedSymlinkTarget + ` "$LINK"; }`},
		Env: []corev1.EnvVar{{Name: "TARGET", Value: hostedDataMountPath + "/" + hostedSymlinkTarget},
			{Name: "LINK", Value: hostedDataMountPath + "/data"}},
		VolumeMounts: mounts[:1],
	}}
}

// podDirsIn are a hosted pod's data dir and WAL dir ("" in the data dir)
// on the node, in its PV at pvPath.
func podDirsIn(layout, pvPath string) (data, wal string) {
	switch layout {
	case HostedLayoutVolumeRoot:
		return pvPath, ""
	case HostedLayoutSubPathWALDir:
		return filepath.Join(pvPath, "data"), filepath.Join(pvPath, "wal")
	}
	return filepath.Join(pvPath, "data"), "" // HostedLayoutSymlink: the link
}

// HostedSymlinkTarget is where a HostedLayoutSymlink pod's data link
// points, in its PV at pvPath.
func HostedSymlinkTarget(pvPath string) string {
	return filepath.Join(pvPath, hostedSymlinkTarget)
}

// wipePodDirs removes a hosted pod's member state: a data dir that is the
// PV's path keeps its path (the PV's data lost, the PV still there); a
// symlinked one keeps its link and target, emptied (as a disk wiped by
// hand behind the link).
func wipePodDirs(layout, pvPath string) error {
	data, wal := podDirsIn(layout, pvPath)
	if layout != HostedLayoutVolumeRoot && layout != HostedLayoutSymlink {
		return errors.Join(removeAllRacing(data), removeIfSet(wal))
	}
	entries, err := os.ReadDir(data)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, removeAllRacing(filepath.Join(data, e.Name())))
	}
	return errors.Join(errs...)
}

func removeIfSet(path string) error {
	if path == "" {
		return nil
	}
	return removeAllRacing(path)
}
