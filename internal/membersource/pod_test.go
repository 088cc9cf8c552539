package membersource

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

type vols struct {
	pvcs map[string]*corev1.PersistentVolumeClaim
	pvs  map[string]*corev1.PersistentVolume
}

func (v vols) PVC(ns, name string) (*corev1.PersistentVolumeClaim, error) {
	if c, ok := v.pvcs[ns+"/"+name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("pvc %s/%s not found", ns, name)
}

func (v vols) PV(name string) (*corev1.PersistentVolume, error) {
	if p, ok := v.pvs[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("pv %s not found", name)
}

func bound(ns, name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "claim-" + types.UID(name)},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
}

func memberPod(data corev1.VolumeSource) *corev1.Pod {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-2", Namespace: "clusters-b", UID: "uid-2",
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "etcd", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "node2",
			Containers: []corev1.Container{{Name: "etcd",
				Command:      []string{"/bin/etcd-agent", "gate", "--state-dir=/agent/members/$(POD_NAMESPACE)_$(POD_NAME)", "--endpoints=http://a:2379,http://b:2379", "--", "etcd"},
				Args:         []string{"--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data", "--advertise-client-urls=http://$(POD_IP):2379", "--initial-advertise-peer-urls=http://$(POD_IP):2380"},
				Env:          []corev1.EnvVar{field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace"), field("POD_IP", "status.podIP")},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}, {Name: "agent", MountPath: "/agent"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: data}, {Name: "agent", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/etcd-agent"}}}}},
		Status: corev1.PodStatus{PodIP: "127.80.0.2"},
	}
}

var claim = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-etcd-2"}}

func TestFromPodFollowsThePVCToTheLocalPVOnTheNode(t *testing.T) {
	v := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "node2-pv3")},
		pvs: map[string]*corev1.PersistentVolume{"node2-pv3": {ObjectMeta: metav1.ObjectMeta{Name: "node2-pv3"},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/pv3"}}}}}}
	pm, err := FromPod(memberPod(claim), v, "")
	if err != nil {
		t.Fatal(err)
	}
	if pm.Key != "clusters-b/etcd-2" || pm.Cluster != "clusters-b/etcd" || pm.Identity.Name != "etcd-2" ||
		pm.Identity.DataDir != "/mnt/disks/pv3/data" || pm.Identity.ClientURL != "http://127.80.0.2:2379" ||
		pm.PVC != "data-etcd-2" || pm.PV != "node2-pv3" || pm.PVCUID != "claim-data-etcd-2" || !pm.GateWrapped ||
		pm.GateStateDir != "/var/lib/etcd-agent/members/clusters-b_etcd-2" || strings.Join(pm.Endpoints, ",") != "http://a:2379,http://b:2379" {
		t.Fatalf("%+v", pm)
	}
}

func TestFromPodFindsACSIVolumeWhereTheKubeletMountsIt(t *testing.T) {
	v := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "pvc-123")},
		pvs: map[string]*corev1.PersistentVolume{"pvc-123": {ObjectMeta: metav1.ObjectMeta{Name: "pvc-123"},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "local.csi.openebs.io", VolumeHandle: "h"}}}}}}
	pm, err := FromPod(memberPod(claim), v, "/host/kubelet/pods")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/host/kubelet/pods/uid-2/volumes/kubernetes.io~csi/pvc-123/mount/data"; pm.Identity.DataDir != want || !pm.DataDirPerPod {
		t.Fatalf("data dir %s, want %s", pm.Identity.DataDir, want)
	}
}

func TestFromPodOnAHostPathVolume(t *testing.T) {
	pm, err := FromPod(memberPod(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/etcd"}}), vols{}, "")
	if err != nil {
		t.Fatal(err)
	}
	if pm.Identity.DataDir != "/srv/etcd/data" || pm.PVC != "" || pm.PV != "" {
		t.Fatalf("%+v", pm)
	}
}

func TestFromPodSaysNotReadyOrRefuses(t *testing.T) {
	noIP := memberPod(claim)
	noIP.Status.PodIP = ""
	pending := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": {Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}}}}
	if _, err := FromPod(noIP, pending, ""); !errors.Is(err, ErrNotReady) {
		t.Fatalf("no IP: %v", err)
	}
	if _, err := FromPod(memberPod(claim), pending, ""); !errors.Is(err, ErrNotReady) {
		t.Fatalf("unbound PVC: %v", err)
	}
	nfs := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "nfs")},
		pvs: map[string]*corev1.PersistentVolume{"nfs": {Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/x"}}}}}}
	if _, err := FromPod(memberPod(claim), nfs, ""); err == nil || errors.Is(err, ErrNotReady) {
		t.Fatalf("an NFS PV must be refused for good: %v", err)
	}
	gateOnPVC := memberPod(claim)
	gateOnPVC.Spec.Volumes[1].VolumeSource = claim
	local := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "pv")},
		pvs: map[string]*corev1.PersistentVolume{"pv": {Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/d"}}}}}}
	if _, err := FromPod(gateOnPVC, local, ""); err == nil || !strings.Contains(err.Error(), "must be the node's") {
		t.Fatalf("the gate's state on the PVC: %v", err)
	}
}

func TestClusterOfPrefersTheLabel(t *testing.T) {
	p := memberPod(claim)
	if ClusterOf(p) != "clusters-b/etcd" {
		t.Fatal(ClusterOf(p))
	}
	p.Labels = map[string]string{ClusterLabel: "hc-42"}
	if ClusterOf(p) != "hc-42" {
		t.Fatal(ClusterOf(p))
	}
}
