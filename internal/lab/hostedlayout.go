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
)

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
	}
	return nil, nil, fmt.Errorf("unknown hosted layout %q (want %q, %q or %q)", layout, HostedLayoutSubdir, HostedLayoutVolumeRoot, HostedLayoutSubPathWALDir)
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
	return filepath.Join(pvPath, "data"), ""
}

// wipePodDirs removes a hosted pod's member state: a data dir that is the
// PV's path keeps its path (the PV's data lost, the PV still there).
func wipePodDirs(layout, pvPath string) error {
	data, wal := podDirsIn(layout, pvPath)
	if layout != HostedLayoutVolumeRoot {
		return errors.Join(os.RemoveAll(data), removeIfSet(wal))
	}
	entries, err := os.ReadDir(data)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(data, e.Name())))
	}
	return errors.Join(errs...)
}

func removeIfSet(path string) error {
	if path == "" {
		return nil
	}
	return os.RemoveAll(path)
}
