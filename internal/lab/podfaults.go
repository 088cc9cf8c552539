package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Faults of a management lab, addressed by pod ("clusters-a/etcd-1") or by
// API object, as an SRE would cause them with kubectl or a broken disk.

// ParsePodRef splits "namespace/name".
func ParsePodRef(ref string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("pod %q: want namespace/name, e.g. clusters-a/etcd-1", ref)
	}
	return ns, name, nil
}

// DeletePod deletes a pod as `kubectl delete pod` does: with its grace
// period, or with force at once (the API forgets it even if its node
// still runs it, the way an SRE unsticks a pod of a dead node).
func (l *Lab) DeletePod(ctx context.Context, ns, name string, force bool) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	opts := metav1.DeleteOptions{}
	if force {
		opts.GracePeriodSeconds = ptr(int64(0))
	}
	l.log.Info("fault: delete pod", zap.String("pod", ns+"/"+name), zap.Bool("force", force))
	return kc.CoreV1().Pods(ns).Delete(ctx, name, opts)
}

// DeletePVC deletes a PVC (the PVC protection finalizer keeps it until no
// pod uses it); its local PV is released and kept (Retain).
func (l *Lab) DeletePVC(ctx context.Context, ns, name string) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	l.log.Info("fault: delete pvc", zap.String("pvc", ns+"/"+name))
	return kc.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
}

// Cordon marks a Node unschedulable (or schedulable again).
func (l *Lab) Cordon(ctx context.Context, node string, unschedulable bool) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	_, err = kc.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// HostedDataPVC is the PVC of a hosted etcd pod's data volume.
func HostedDataPVC(pod string) string { return "data-" + pod }

// PodDataDir is the node folder of a hosted etcd pod's data dir: the path
// of the local PV bound to its PVC, plus the data dir inside the volume
// (its cluster's layout: the PV's path itself for HostedLayoutVolumeRoot).
func (l *Lab) PodDataDir(ctx context.Context, ns, pod string) (string, error) {
	pv, err := l.PodPVDir(ctx, ns, pod)
	if err != nil {
		return "", err
	}
	data, _ := podDirsIn(l.hostedLayout(ns), pv)
	return data, nil
}

// PodPVDir is the path of the local PV bound to a hosted etcd pod's PVC.
func (l *Lab) PodPVDir(ctx context.Context, ns, pod string) (string, error) {
	kc, err := l.KubeClient()
	if err != nil {
		return "", err
	}
	pvc, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, HostedDataPVC(pod), metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("PVC %s/%s is not bound", ns, pvc.Name)
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pv.Spec.Local == nil {
		return "", fmt.Errorf("PV %s is not a local PV", pv.Name)
	}
	return pv.Spec.Local.Path, nil
}

// WipePodData removes a hosted etcd pod's data dir from its PV while etcd
// may run (the PV's data lost).
func (l *Lab) WipePodData(ctx context.Context, ns, pod string) error {
	pv, err := l.PodPVDir(ctx, ns, pod)
	if err != nil {
		return err
	}
	l.log.Info("fault: wipe pod data", zap.String("pod", ns+"/"+pod), zap.String("pv", pv), zap.String("layout", l.hostedLayout(ns)))
	l.wipesMu.Lock()
	l.wipes = append(l.wipes, Wipe{Pod: ns + "/" + pod, At: time.Now()})
	l.wipesMu.Unlock()
	return wipePodDirs(l.hostedLayout(ns), pv)
}

// CorruptPodDB and CorruptPodWAL are CorruptDB and CorruptWAL for a pod.
func (l *Lab) CorruptPodDB(ctx context.Context, ns, pod string) error {
	dir, err := l.PodDataDir(ctx, ns, pod)
	if err != nil {
		return err
	}
	return l.corruptDBIn(ns+"/"+pod, dir)
}

func (l *Lab) CorruptPodWAL(ctx context.Context, ns, pod string) error {
	dir, err := l.PodDataDir(ctx, ns, pod)
	if err != nil {
		return err
	}
	return l.corruptWALIn(ns+"/"+pod, dir)
}

// PodContainerPID is the PID of a running container of an API pod, from the
// supervisor state of the node the pod is bound to.
func (l *Lab) PodContainerPID(ctx context.Context, ns, pod, container string) (int, error) {
	kc, err := l.KubeClient()
	if err != nil {
		return 0, err
	}
	p, err := kc.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	if p.Spec.NodeName == "" {
		return 0, fmt.Errorf("pod %s/%s is not scheduled", ns, pod)
	}
	return l.containerPID(p.Spec.NodeName, ns+"/"+pod, container)
}

// SignalPod sends sig to a hosted etcd pod's etcd (SIGKILL: its lab kubelet
// restarts it; SIGSTOP/SIGCONT: a hung member).
func (l *Lab) SignalPod(ctx context.Context, ns, pod string, sig syscall.Signal) (int, error) {
	pid, err := l.PodContainerPID(ctx, ns, pod, "etcd")
	if err != nil {
		return 0, err
	}
	l.log.Info("fault: signal pod", zap.String("pod", ns+"/"+pod), zap.Int("pid", pid), zap.Stringer("signal", sig))
	return pid, signalOurs(pid, l.Spec.Dir, sig)
}

// Pod reads an API pod.
func (l *Lab) Pod(ctx context.Context, ns, pod string) (*corev1.Pod, error) {
	kc, err := l.KubeClient()
	if err != nil {
		return nil, err
	}
	return kc.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
}

// PartitionKubelet SIGSTOPs a worker's lab kubelet (paused: false resumes
// it with SIGCONT): the API sees the node's heartbeats stop and the
// node-lifecycle controller marks it NotReady, while its pods' processes,
// the agent among them, keep running and serving (a kubelet cut off from
// the API, or hung, on a node whose etcd members still reach their peers).
func (l *Lab) PartitionKubelet(node string, paused bool) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	sig := syscall.SIGSTOP
	if !paused {
		sig = syscall.SIGCONT
	}
	l.log.Info("fault: kubelet partition", zap.String("node", node), zap.Bool("paused", paused))
	return signalOurs(n.SupervisorPID, n.NodeDir, sig)
}

// CopyPodData copies a hosted etcd pod's data dir to dst as a snapshot of
// the live volume would: etcd is frozen (SIGSTOP) for the copy, so the copy
// is one moment's state (crash-consistent), then resumed.
func (l *Lab) CopyPodData(ctx context.Context, ns, pod, dst string) error {
	dir, err := l.PodDataDir(ctx, ns, pod)
	if err != nil {
		return err
	}
	pid, err := l.SignalPod(ctx, ns, pod, syscall.SIGSTOP)
	if err != nil {
		return err
	}
	defer func() { _ = signalOurs(pid, l.Spec.Dir, syscall.SIGCONT) }()
	l.log.Info("fault: copy pod data aside", zap.String("pod", ns+"/"+pod), zap.String("dir", dir), zap.String("to", dst))
	return copyDir(dir, dst)
}

// RestorePodData puts a copy made by CopyPodData back as the pod's data dir
// (its PVC restored from a volume snapshot): etcd is frozen, the data dir it
// has is moved to aside (kept), the copy is put in its place, and etcd is
// killed: the lab kubelet restarts the container on the restored data.
func (l *Lab) RestorePodData(ctx context.Context, ns, pod, src, aside string) error {
	dir, err := l.PodDataDir(ctx, ns, pod)
	if err != nil {
		return err
	}
	pid, err := l.SignalPod(ctx, ns, pod, syscall.SIGSTOP)
	if err != nil {
		return err
	}
	l.log.Info("fault: restore an older copy of the pod data", zap.String("pod", ns+"/"+pod), zap.String("dir", dir), zap.String("from", src))
	if err := restoreInPlace(src, dir, aside); err != nil {
		_ = signalOurs(pid, l.Spec.Dir, syscall.SIGCONT)
		return err
	}
	return signalOurs(pid, l.Spec.Dir, syscall.SIGKILL)
}

// RestorePodDataToNewClaim restores a copy made by CopyPodData the way a
// VolumeSnapshot or backup restore does: onto a new volume, under a new
// claim of the same name. A new local PV on the pod's node gets the copy and
// is pre-bound to the claim's name; the pod's claim and the pod are deleted;
// the StatefulSet makes a new claim (bound to that PV) and a new pod on it.
// The old PV is released and kept. It returns the new PV's name.
func (l *Lab) RestorePodDataToNewClaim(ctx context.Context, ns, pod, src string) (string, error) {
	p, err := l.Pod(ctx, ns, pod)
	if err != nil {
		return "", err
	}
	if p.Spec.NodeName == "" {
		return "", fmt.Errorf("pod %s/%s is not scheduled", ns, pod)
	}
	claim := HostedDataPVC(pod)
	pv, err := l.addPV(ctx, p.Spec.NodeName, func(dir string) error { return copyDir(src, filepath.Join(dir, "data")) },
		&corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: claim})
	if err != nil {
		return "", err
	}
	l.log.Info("fault: restore pod data to a new claim", zap.String("pod", ns+"/"+pod), zap.String("pv", pv.Name), zap.String("from", src))
	if err := l.DeletePVC(ctx, ns, claim); err != nil {
		return "", err
	}
	return pv.Name, l.DeletePod(ctx, ns, pod, false)
}
