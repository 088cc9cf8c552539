// Package realnode runs a lab node with the real kubelet, containerd and
// runc (docs/management-lab.md, "The real node"; docs/plans/real-node.md).
// The lab starts this package's Run as a process of its own in a new network
// and mount namespace; that process is the node: it lays out the node's
// mounts, forwards the lab's loopback addresses into its network namespace,
// starts containerd, imports the lab's images, starts kubelet, and on
// SIGTERM stops all of it. Its namespaces die with it, and with them every
// mount kubelet, containerd and runc made.
package realnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// ConfigFile is the node's config, in the node dir, written by the lab.
const ConfigFile = "realnode.json"

// Config is what the lab tells the node process.
type Config struct {
	// NodeDir holds the node's own folders (Layout).
	NodeDir string `json:"nodeDir"`
	// BinDir holds containerd, containerd-shim-runc-v2, ctr, runc, kubelet
	// and cni/loopback.
	BinDir string `json:"binDir"`
	// Images are docker-save archives to import into containerd's k8s.io
	// namespace before kubelet starts (hack/images).
	Images []string `json:"images"`
	// NodeIP/Prefix is eth0's address; the lab holds the veth's other end.
	NodeIP string `json:"nodeIP"`
	Prefix int    `json:"prefix"`
	// LoopbackIPs are put on the node's lo as /32: the `kubernetes`
	// Service's ClusterIP, which in-cluster clients dial (no kube-proxy).
	LoopbackIPs []string `json:"loopbackIPs,omitempty"`
	// Forwards are host:port addresses listened on inside the node and
	// forwarded to the same address in the lab's network namespace: the
	// other members and the API server on 127.0.0.0/8. A listen address
	// whose forward goes elsewhere is written "listen=target".
	Forwards []string `json:"forwards"`
	// KubeletArgs are kubelet's flags (the lab writes its config files).
	KubeletArgs []string `json:"kubeletArgs"`
	// ContainerdConfig is containerd's config file.
	ContainerdConfig string `json:"containerdConfig"`
}

// Layout is where a node dir's parts are, seen from the lab: each is
// mounted inside the node at the path a real node has it.
type Layout struct{ NodeDir string }

// VarLib is the node's /var/lib (the etcd data dir, kubelet, containerd,
// the agent's state dir).
func (l Layout) VarLib() string { return filepath.Join(l.NodeDir, "var-lib") }

// VarLog is the node's /var/log (kubelet writes pod logs there).
func (l Layout) VarLog() string { return filepath.Join(l.NodeDir, "var-log") }

// Kubernetes is the node's /etc/kubernetes (manifests, pki/etcd).
func (l Layout) Kubernetes() string { return filepath.Join(l.NodeDir, "etc-kubernetes") }

// EtcUpper and EtcWork are the overlay over the node's /etc that gives it
// an /etc/kubernetes without touching the machine's /etc.
func (l Layout) EtcUpper() string { return filepath.Join(l.NodeDir, "etc-upper") }
func (l Layout) EtcWork() string  { return filepath.Join(l.NodeDir, "etc-work") }

// Logs holds containerd's and kubelet's logs.
func (l Layout) Logs() string { return filepath.Join(l.NodeDir, "logs") }

// Dirs are the folders the node needs before it starts.
func (l Layout) Dirs() []string {
	return []string{l.VarLib(), l.VarLog(), l.Kubernetes(), filepath.Join(l.Kubernetes(), "manifests"),
		l.EtcUpper(), l.EtcWork(), l.Logs()}
}

// Save writes c into its node dir.
func (c Config) Save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.NodeDir, ConfigFile), b, 0o644)
}

// Load reads the config in nodeDir.
func Load(nodeDir string) (Config, error) {
	var c Config
	b, err := os.ReadFile(filepath.Join(nodeDir, ConfigFile))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", filepath.Join(nodeDir, ConfigFile), err)
	}
	return c, nil
}
