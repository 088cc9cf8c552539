package membersource

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func tlsVols() vols {
	return vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "node2-pv3")},
		pvs: map[string]*corev1.PersistentVolume{"node2-pv3": localPV("node2-pv3", "/mnt/disks/pv3")}}
}

// HyperShift (named as supported in docs/recovery.md) mounts its etcd CA
// from a ConfigMap (volume etcd-ca, configMap etcd-ca) beside Secret
// volumes for the certs. A gate given that CA (--cacert=/etc/etcd/tls/etcd-ca/ca.crt)
// makes FromPod fail: the member is not served at all, said only in a log.
func TestFromPodFindsAGateCAInAConfigMapVolume(t *testing.T) {
	pod := tlsPod()
	c := &pod.Spec.Containers[0]
	c.Command[4] = "--cacert=/etc/etcd/tls/etcd-ca/ca.crt"
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "etcd-ca", MountPath: "/etc/etcd/tls/etcd-ca", ReadOnly: true})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "etcd-ca",
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "etcd-ca"}}}})
	pm, err := FromPod(pod, tlsVols(), "/host/kubelet/pods")
	if err != nil {
		t.Fatalf("a HyperShift-style ConfigMap CA: %v", err)
	}
	if want := "/host/kubelet/pods/uid-2/volumes/kubernetes.io~configmap/etcd-ca/ca.crt"; pm.ClientTLS.CACert.Path() != want {
		t.Fatalf("CA %+v, want %s", pm.ClientTLS.CACert, want)
	}
}

// Defence in depth only: a subPath with ".." is rejected by the API
// server's validation, so an API pod cannot carry one; resolver.hostPath
// (filepath.Join(root, best.SubPath, rel)) does not check it itself.
func TestFromPodRefusesASubPathThatLeavesItsVolume(t *testing.T) {
	pod := tlsPod()
	c := &pod.Spec.Containers[0]
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == "tls" {
			c.VolumeMounts[i].SubPath = "../../../../../../../../etc/kubernetes/pki/etcd"
		}
	}
	pm, err := FromPod(pod, tlsVols(), "/host/kubelet/pods")
	if err == nil && !strings.HasPrefix(pm.ClientTLS.Key.Path(), "/host/kubelet/pods/uid-2/volumes/kubernetes.io~secret/tls/") {
		t.Fatalf("the gate's --key resolves to %s, outside its Secret volume", pm.ClientTLS.Key.Path())
	}
}
