package lab

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// etcdPodManifest renders a kubeadm-style etcd static pod for node n whose
// container runs the lab's real etcd binary (spec). initialCluster is the
// --initial-cluster value, state "new" or "existing". gate, when set, is the
// agent's start gate, run as etcd's wrapper ("gate ... -- etcd ..."), so
// every start of etcd, container restarts included, passes it.
func etcdPodManifest(spec *Spec, n Node, initialCluster, state, token string, gate []string, t *EtcdTLS) ([]byte, error) {
	etcdBin := spec.nodeEtcdBinary(n)
	image, err := EtcdImageOf(etcdBin)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--name=" + n.Member,
		"--data-dir=" + n.DataDir,
		"--listen-client-urls=" + n.ClientURL,
		"--advertise-client-urls=" + n.ClientURL,
		"--listen-peer-urls=" + n.PeerListen(),
		"--initial-advertise-peer-urls=" + n.PeerURL,
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=" + token,
		"--snapshot-count=10000",
		"--logger=zap",
		"--log-outputs=stderr",
	}
	if n.MetricsURL != "" {
		args = append(args, "--listen-metrics-urls="+n.MetricsURL)
	}
	if spec.EtcdQuotaBytes > 0 {
		args = append(args, fmt.Sprintf("--quota-backend-bytes=%d", spec.EtcdQuotaBytes))
	}
	if spec.EtcdNoPurge {
		args = append(args, "--max-snapshots=0", "--max-wals=0")
	}
	mounts := []corev1.VolumeMount{{Name: "etcd-data", MountPath: n.DataDir}}
	volumes := []corev1.Volume{{
		Name: "etcd-data",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: n.DataDir, Type: ptr(corev1.HostPathDirectoryOrCreate),
		}},
	}}
	if n.WALDir != "" {
		args = append(args, "--wal-dir="+n.WALDir)
		walVolume := filepath.Dir(n.WALDir)
		mounts = append(mounts, corev1.VolumeMount{Name: "etcd-wal", MountPath: walVolume})
		volumes = append(volumes, corev1.Volume{Name: "etcd-wal", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: walVolume, Type: ptr(corev1.HostPathDirectoryOrCreate)}}})
	}
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
				Image:        image,
				Command:      etcdCommand(gate, etcdBin, args),
				VolumeMounts: mounts,
			}},
			Volumes: volumes,
		},
	}
	return yaml.Marshal(&pod)
}

// etcdCommand is etcd's command line, through the start gate when there is one.
func etcdCommand(gate []string, etcdBin string, args []string) []string {
	cmd := append([]string{etcdBin}, args...)
	if len(gate) == 0 {
		return cmd
	}
	return append(append(slices.Clone(gate), "--"), cmd...)
}

// gateCommand is the start gate's command line for node n's etcd pod.
func (l *Lab) gateCommand(n Node) []string {
	if !l.Spec.Agents {
		return nil
	}
	cmd := []string{l.Spec.AgentBinary, "gate", "--state-dir=" + n.StateDir, "--node-name=" + n.Name,
		"--endpoints=" + strings.Join(l.Spec.ClientURLs(), ","), "--poll-interval=500ms", "--log-format=json"}
	if a := l.Spec.APIServer; a != nil {
		cmd = append(cmd, "--kubeconfig="+a.Kubeconfig)
	}
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

// readEtcdManifest reads node n's etcd manifest where it is: in the
// manifests dir, or the copy StopMember moved aside.
func readEtcdManifest(n Node) (string, []byte, error) {
	path := n.EtcdManifest()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		path = stoppedManifest(n)
	}
	b, err := os.ReadFile(path)
	return path, b, err
}

// KubeadmFirstNodeManifest rewrites node's etcd manifest (in place, or the
// copy StopMember moved aside) the way kubeadm writes it on the first
// control-plane node: --initial-cluster names only this member and there is
// no --initial-cluster-state (etcd's default, "new").
func (l *Lab) KubeadmFirstNodeManifest(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	path, b, err := readEtcdManifest(*n)
	if err != nil {
		return err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return err
	}
	for i, c := range pod.Spec.Containers {
		if c.Name != "etcd" {
			continue
		}
		var cmd []string
		for _, tok := range c.Command {
			switch {
			case strings.HasPrefix(tok, "--initial-cluster-state="):
				continue
			case strings.HasPrefix(tok, "--initial-cluster="):
				tok = "--initial-cluster=" + n.Member + "=" + n.PeerURL
			}
			cmd = append(cmd, tok)
		}
		pod.Spec.Containers[i].Command = cmd
	}
	out, err := yaml.Marshal(&pod)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}
