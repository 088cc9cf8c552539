package lab

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// etcdPodManifest renders a kubeadm-style etcd static pod for node n whose
// container runs the real etcd binary etcdBin. initialCluster is the
// --initial-cluster value, state "new" or "existing". gate, when set, is the
// agent's start gate, run as the pod's init container.
func etcdPodManifest(etcdBin string, n Node, initialCluster, state, token string, gate []string, t *EtcdTLS) ([]byte, error) {
	args := []string{
		"--name=" + n.Member,
		"--data-dir=" + n.DataDir,
		"--listen-client-urls=" + n.ClientURL,
		"--advertise-client-urls=" + n.ClientURL,
		"--listen-peer-urls=" + n.PeerURL,
		"--initial-advertise-peer-urls=" + n.PeerURL,
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=" + token,
		"--snapshot-count=10000",
		"--logger=zap",
		"--log-outputs=stderr",
	}
	mounts := []corev1.VolumeMount{{Name: "etcd-data", MountPath: n.DataDir}}
	volumes := []corev1.Volume{{
		Name: "etcd-data",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: n.DataDir, Type: ptr(corev1.HostPathDirectoryOrCreate),
		}},
	}}
	if t != nil {
		args = append(args, t.memberFlags()...)
		mounts = append(mounts, corev1.VolumeMount{Name: "etcd-certs", MountPath: t.Dir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "etcd-certs", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: t.Dir, Type: ptr(corev1.HostPathDirectory)}}})
	}
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "etcd-" + n.Name,
			Namespace: "kube-system",
			Labels:    map[string]string{"component": "etcd", "tier": "control-plane"},
			Annotations: map[string]string{
				"kubeadm.kubernetes.io/etcd.advertise-client-urls": n.ClientURL,
			},
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Containers: []corev1.Container{{
				Name:         "etcd",
				Image:        "registry.k8s.io/etcd:3.6.16-0",
				Command:      append([]string{etcdBin}, args...),
				VolumeMounts: mounts,
			}},
			Volumes: volumes,
		},
	}
	if len(gate) > 0 {
		pod.Spec.InitContainers = []corev1.Container{{Name: "etcd-agent-gate", Image: "etcd-agent:dev", Command: gate}}
	}
	return yaml.Marshal(&pod)
}

// gateCommand is the start gate's command line for node n's etcd pod.
func (l *Lab) gateCommand(n Node) []string {
	if !l.Spec.Agents {
		return nil
	}
	cmd := []string{l.Spec.AgentBinary, "gate", "--static-pod-manifest=" + n.EtcdManifest(), "--state-dir=" + n.StateDir,
		"--endpoints=" + strings.Join(l.Spec.ClientURLs(), ","), "--poll-interval=500ms", "--log-format=json"}
	if t := l.Spec.EtcdTLS; t != nil {
		cmd = append(cmd, t.agentFlags()...)
	}
	return cmd
}

// initialCluster renders name=peerURL pairs for --initial-cluster.
func initialCluster(nodes []Node) string {
	var parts []string
	for _, n := range nodes {
		if n.Member != "" {
			parts = append(parts, fmt.Sprintf("%s=%s", n.Member, n.PeerURL))
		}
	}
	return strings.Join(parts, ",")
}

func ptr[T any](v T) *T { return &v }
