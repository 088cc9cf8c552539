package lab

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/lab/realnode"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Paths inside the real node, as kubeadm lays a control-plane node out.
const (
	nodeEtcdDataDir = "/var/lib/etcd"
	nodeAgentState  = "/var/lib/etcd-agent"
	nodeEtcdPKI     = "/etc/kubernetes/pki/etcd"
	nodeManifests   = "/etc/kubernetes/manifests"
)

// newRealNode lays out the lab node that the real kubelet runs: its paths
// as seen from the lab are the node dir's folders that the node mounts at
// /var/lib and /etc/kubernetes (realnode.Layout).
func (l *Lab) newRealNode(i int, nodeIP string) (Node, error) {
	name := fmt.Sprintf("node%d", i)
	nodeDir := filepath.Join(l.Spec.Dir, name)
	lay := realnode.Layout{NodeDir: nodeDir}
	for _, d := range lay.Dirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Node{}, err
		}
	}
	n := Node{Name: name, IP: nodeIP, NodeDir: nodeDir, Member: name,
		DiskDir: lay.VarLib(), DataDir: filepath.Join(lay.VarLib(), "etcd"),
		ManifestsDir: filepath.Join(lay.Kubernetes(), "manifests"), LogsDir: lay.Logs(),
		StateDir:   filepath.Join(lay.VarLib(), "etcd-agent"),
		ClientURL:  fmt.Sprintf("https://%s:2379", nodeIP),
		PeerURL:    fmt.Sprintf("https://%s:2380", nodeIP),
		MetricsURL: fmt.Sprintf("http://%s:2381", nodeIP),
		// The shipped DaemonSet's agent: hostNetwork, :9793.
		AgentMetricsURL: fmt.Sprintf("http://%s:9793/metrics", nodeIP),
		Real:            true,
	}
	return n, os.MkdirAll(n.StateDir, 0o755)
}

// writeRealNodePKI copies the lab's etcd PKI into the node's
// /etc/kubernetes/pki/etcd under kubeadm's names, which the shipped
// DaemonSet reads.
func (l *Lab) writeRealNodePKI(n Node) error {
	t := l.Spec.EtcdTLS
	dir := filepath.Join(realnode.Layout{NodeDir: n.NodeDir}.Kubernetes(), "pki", "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for src, dst := range map[string]string{
		t.CAFile: "ca.crt", t.ServerCert: "server.crt", t.ServerKey: "server.key",
		t.ClientCert: "healthcheck-client.crt", t.ClientKey: "healthcheck-client.key",
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// realNodeEtcdManifest is a kubeadm etcd static pod with the start gate as
// docs/recovery.md tells users to add it: an init container copies the
// agent into an emptyDir, and the etcd container runs etcd through it.
func realNodeEtcdManifest(n Node, initialCluster, token string) ([]byte, error) {
	pki := func(f string) string { return nodeEtcdPKI + "/" + f }
	metrics, _ := url.Parse(n.MetricsURL)
	etcd := []string{"etcd",
		"--name=" + n.Member,
		"--data-dir=" + nodeEtcdDataDir,
		"--advertise-client-urls=" + n.ClientURL,
		"--listen-client-urls=https://127.0.0.1:2379," + n.ClientURL,
		"--initial-advertise-peer-urls=" + n.PeerURL,
		"--listen-peer-urls=" + n.PeerURL,
		"--listen-metrics-urls=http://" + metrics.Host,
		"--initial-cluster=" + initialCluster,
		"--initial-cluster-state=new",
		"--initial-cluster-token=" + token,
		"--cert-file=" + pki("server.crt"), "--key-file=" + pki("server.key"),
		"--trusted-ca-file=" + pki("ca.crt"), "--client-cert-auth=true",
		"--peer-cert-file=" + pki("server.crt"), "--peer-key-file=" + pki("server.key"),
		"--peer-trusted-ca-file=" + pki("ca.crt"), "--peer-client-cert-auth=true",
		"--snapshot-count=10000",
	}
	gate := []string{"/gate/etcd-agent", "gate", "--state-dir=" + nodeAgentState,
		"--cacert=" + pki("ca.crt"), "--cert=" + pki("healthcheck-client.crt"), "--key=" + pki("healthcheck-client.key"),
		"--log-format=json", "--"}
	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "etcd", Namespace: "kube-system",
			Labels:      map[string]string{"component": "etcd", "tier": "control-plane"},
			Annotations: map[string]string{"kubeadm.kubernetes.io/etcd.advertise-client-urls": n.ClientURL},
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			SecurityContext:   &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			InitContainers: []corev1.Container{{
				Name: "etcd-agent-install-gate", Image: AgentImage, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"/usr/local/bin/etcd-agent", "install-gate", "--to=/gate"},
				VolumeMounts: []corev1.VolumeMount{{Name: "etcd-agent-gate", MountPath: "/gate"}},
			}},
			Containers: []corev1.Container{{
				Name: "etcd", Image: EtcdImage, ImagePullPolicy: corev1.PullNever,
				Command: append(gate, etcd...),
				VolumeMounts: []corev1.VolumeMount{
					{Name: "etcd-data", MountPath: nodeEtcdDataDir},
					{Name: "etcd-certs", MountPath: nodeEtcdPKI},
					{Name: "etcd-agent-gate", MountPath: "/gate", ReadOnly: true},
					{Name: "etcd-agent-state", MountPath: nodeAgentState, ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				hostPath("etcd-data", nodeEtcdDataDir, corev1.HostPathDirectoryOrCreate),
				hostPath("etcd-certs", nodeEtcdPKI, corev1.HostPathDirectoryOrCreate),
				{Name: "etcd-agent-gate", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				hostPath("etcd-agent-state", nodeAgentState, corev1.HostPathDirectoryOrCreate),
			},
		},
	}
	return yaml.Marshal(&pod)
}

// containerdConfig is containerd 2.x's config (version 3) for the node:
// runc from bin/, cgroupfs (kubelet's driver on cgroup v1), the lab's
// loopback CNI plugin, and the lab's pause image as the sandbox.
// restrict_oom_score_adj: see docs/management-lab.md, "The real node".
func containerdConfig(binDir string) string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

# This machine gives root no CAP_SYS_RESOURCE: an OOM score below
# containerd's own (kubelet asks -997/-998 for critical pods) is refused.
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = %q
  SystemdCgroup = false

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = [%q]
  conf_dir = "/etc/cni/net.d"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %q
`, filepath.Join(binDir, "runc"), filepath.Join(binDir, "cni"), PauseImage)
}

// kubeletConfig is the node's KubeletConfiguration. On this machine:
// cgroup v1 (failCgroupV1 false, KEP-5573), cgroupfs under the lab's own
// cgroup root, no swap accounting, thresholds a small shared disk passes,
// and the sysctls kubelet needs checked, not set (the lab sets and
// restores them).
func kubeletConfig(r *RealNode, caFile string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
staticPodPath: %s
fileCheckFrequency: 1s
syncFrequency: 10s
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
protectKernelDefaults: true
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
nodeLeaseDurationSeconds: 10
maxPods: 16
serializeImagePulls: false
`, r.CgroupRoot, nodeManifests, r.NodeIP, caFile)
}

// realNodeForwards are the addresses the node reaches the lab by: every
// other member's client and peer URL, the API server, and the `kubernetes`
// Service's ClusterIP (to the API server).
func (l *Lab) realNodeForwards() []string {
	var out []string
	for _, n := range l.Spec.Nodes {
		if n.Real || n.Member == "" {
			continue
		}
		for _, u := range []string{n.ClientURL, n.PeerURL} {
			if p, err := url.Parse(u); err == nil {
				out = append(out, p.Host)
			}
		}
	}
	if a := l.Spec.APIServer; a != nil {
		if p, err := url.Parse(a.URL); err == nil {
			out = append(out, p.Host, realNodeServiceIP+":443="+p.Host)
		}
	}
	return out
}

// kubeletArgs are kubelet's flags on the node.
func kubeletArgs(n Node, kubeconfig, config string) []string {
	return []string{"--config=" + config, "--kubeconfig=" + kubeconfig,
		"--node-ip=" + n.IP, "--hostname-override=" + n.Name, "--v=2"}
}

func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ",")
}
