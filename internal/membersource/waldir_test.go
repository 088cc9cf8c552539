package membersource

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func localPV(name, path string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}}}}
}

// Issue 38: a member pod run with --wal-dir: the WAL dir is found on the
// node through its volume, as the data dir is.
func TestFromPodFindsTheDedicatedWALDirOnTheDataVolume(t *testing.T) {
	v := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "node2-pv3")},
		pvs: map[string]*corev1.PersistentVolume{"node2-pv3": localPV("node2-pv3", "/mnt/disks/pv3")}}
	pod := memberPod(claim)
	pod.Spec.Containers[0].Args = append(pod.Spec.Containers[0].Args, "--wal-dir=/var/lib/etcd/wal")
	pm, err := FromPod(pod, v, "")
	if err != nil {
		t.Fatal(err)
	}
	if pm.Identity.WALDir != "/mnt/disks/pv3/wal" || pm.Identity.DataDir != "/mnt/disks/pv3/data" {
		t.Fatalf("data dir %q, WAL dir %q; want /mnt/disks/pv3/data and /mnt/disks/pv3/wal", pm.Identity.DataDir, pm.Identity.WALDir)
	}
}

// A WAL dir on a claim of its own: the pod runtime and the steward follow
// one claim per member, so such a pod is refused (not served), never half
// handled.
func TestFromPodRefusesAWALDirOnAnotherClaim(t *testing.T) {
	v := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{
		"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "node2-pv3"),
		"clusters-b/wal-etcd-2":  bound("clusters-b", "wal-etcd-2", "node2-pv4")},
		pvs: map[string]*corev1.PersistentVolume{"node2-pv3": localPV("node2-pv3", "/mnt/disks/pv3"), "node2-pv4": localPV("node2-pv4", "/mnt/disks/pv4")}}
	pod := memberPod(claim)
	c := &pod.Spec.Containers[0]
	c.Args = append(c.Args, "--wal-dir=/var/lib/etcd-wal/wal")
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "wal", MountPath: "/var/lib/etcd-wal"})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "wal",
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "wal-etcd-2"}}})
	_, err := FromPod(pod, v, "")
	if err == nil || !strings.Contains(err.Error(), "wal-etcd-2") {
		t.Fatalf("err = %v, want a refusal naming the WAL's claim", err)
	}
}

// Issue 38: a claim mounted at etcd's --data-dir makes the data dir the
// PV's own path, which the heal must never rename.
func TestFromPodSaysWhenTheDataDirIsThePVsRoot(t *testing.T) {
	v := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "node2-pv3")},
		pvs: map[string]*corev1.PersistentVolume{"node2-pv3": localPV("node2-pv3", "/mnt/disks/pv3")}}
	sub, err := FromPod(memberPod(claim), v, "")
	if err != nil || sub.DataDirVolumeRoot {
		t.Fatalf("data dir a subdir of the claim: volume root %v (%v)", sub.DataDirVolumeRoot, err)
	}
	pod := memberPod(claim)
	pod.Spec.Containers[0].Args[1] = "--data-dir=/var/lib/etcd"
	root, err := FromPod(pod, v, "")
	if err != nil || !root.DataDirVolumeRoot || root.Identity.DataDir != "/mnt/disks/pv3" {
		t.Fatalf("data dir at the claim's mount: volume root %v, data dir %q (%v)", root.DataDirVolumeRoot, root.Identity.DataDir, err)
	}
}

// Review (issue 38): a claim mounted at --data-dir or --wal-dir through a
// subPath, or a hostPath volume mounted at --data-dir, is a mount root in
// etcd's container too (the bind mount is of <volume>/<subPath> itself):
// renaming it on the node drags a held pod's mount along, and etcd cannot
// create a new WAL there. Before, only a claim's mount without a subPath
// counted.
func TestAVolumeMountedRightAtTheDirIsItsRootWhateverItsSubPath(t *testing.T) {
	v := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "node2-pv3")},
		pvs: map[string]*corev1.PersistentVolume{"node2-pv3": localPV("node2-pv3", "/mnt/disks/pv3")}}
	sub := memberPod(claim)
	c := &sub.Spec.Containers[0]
	c.Args[1] = "--data-dir=/var/lib/etcd-data"
	c.Args = append(c.Args, "--wal-dir=/var/lib/etcd-wal")
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: c.VolumeMounts[0].Name, MountPath: "/var/lib/etcd-data", SubPath: "data"},
		corev1.VolumeMount{Name: c.VolumeMounts[0].Name, MountPath: "/var/lib/etcd-wal", SubPath: "wal"})
	pm, err := FromPod(sub, v, "")
	if err != nil || !pm.DataDirVolumeRoot || !pm.Identity.WALDirMountRoot || pm.Identity.DataDir != "/mnt/disks/pv3/data" {
		t.Fatalf("subPath mounts at the dirs: data dir %q volume root %v, WAL dir %q mount root %v (%v); want both roots",
			pm.Identity.DataDir, pm.DataDirVolumeRoot, pm.Identity.WALDir, pm.Identity.WALDirMountRoot, err)
	}
	host := memberPod(claim)
	host.Spec.Containers[0].Args[1] = "--data-dir=/var/lib/etcd"
	host.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/etcd"}}
	pm, err = FromPod(host, v, "")
	if err != nil || !pm.DataDirVolumeRoot {
		t.Fatalf("a hostPath volume at --data-dir: volume root %v (%v), want true", pm.DataDirVolumeRoot, err)
	}
}
