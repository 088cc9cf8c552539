package membersource

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// tlsPod is memberPod serving TLS as etcd-druid and bitnami's chart run
// it: certs from a Secret mounted into etcd's container, the start gate
// reaching the other members with the Secret's client cert.
func tlsPod() *corev1.Pod {
	pod := memberPod(claim)
	c := &pod.Spec.Containers[0]
	c.Command = []string{"/bin/etcd-agent", "gate", "--state-dir=/agent/members/$(POD_NAMESPACE)_$(POD_NAME)", "--endpoints=https://a:2379",
		"--cacert=/etc/etcd/tls/ca.crt", "--cert=/etc/etcd/tls/client.crt", "--key=/etc/etcd/tls/client.key", "--", "etcd"}
	c.Args = []string{"--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data", "--advertise-client-urls=https://$(POD_IP):2379",
		"--initial-advertise-peer-urls=https://$(POD_IP):2380", "--cert-file=/etc/etcd/tls/server.crt", "--key-file=/etc/etcd/tls/server.key",
		"--trusted-ca-file=/etc/etcd/tls/ca.crt", "--client-cert-auth=true"}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "tls", MountPath: "/etc/etcd/tls", ReadOnly: true})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "tls",
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "etcd-tls"}}})
	return pod
}

// Issue 38 (TLS on, StatefulSet members): each hosted cluster has a CA of
// its own, so the agent cannot reach a member with one cert of its own; it
// uses the client cert the member's start gate uses, found on the node
// where the kubelet writes the pod's Secret volume.
func TestFromPodFindsTheGatesClientCertInTheKubeletsSecretVolume(t *testing.T) {
	v := vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "node2-pv3")},
		pvs: map[string]*corev1.PersistentVolume{"node2-pv3": localPV("node2-pv3", "/mnt/disks/pv3")}}
	pm, err := FromPod(tlsPod(), v, "/host/kubelet/pods")
	if err != nil {
		t.Fatal(err)
	}
	dir := "/host/kubelet/pods/uid-2/volumes/kubernetes.io~secret/tls"
	if want := (ClientTLS{CACert: NodeFile{dir, "ca.crt"}, Cert: NodeFile{dir, "client.crt"}, Key: NodeFile{dir, "client.key"}}); pm.ClientTLS != want {
		t.Fatalf("client TLS %+v, want %+v", pm.ClientTLS, want)
	}
	if pm.Identity.DataDir != "/mnt/disks/pv3/data" || pm.DataDirPerPod {
		t.Fatalf("data dir %q per pod %v: a Secret volume beside it changes nothing", pm.Identity.DataDir, pm.DataDirPerPod)
	}
}

// A gate cert the agent cannot find on the node (baked into the image):
// the pod is not served, and the error says which flag and why.
func TestFromPodRefusesAGateCertOnNoVolume(t *testing.T) {
	pod := tlsPod()
	pod.Spec.Containers[0].Command[5] = "--cert=/opt/certs/client.crt"
	_, err := FromPod(pod, vols{pvcs: map[string]*corev1.PersistentVolumeClaim{"clusters-b/data-etcd-2": bound("clusters-b", "data-etcd-2", "node2-pv3")},
		pvs: map[string]*corev1.PersistentVolume{"node2-pv3": localPV("node2-pv3", "/mnt/disks/pv3")}}, "")
	if err == nil || !strings.Contains(err.Error(), "--cert") || !strings.Contains(err.Error(), "/opt/certs/client.crt") {
		t.Fatalf("err = %v, want a refusal naming the gate's --cert", err)
	}
}
