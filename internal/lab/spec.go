// Package lab runs a local etcd control plane for the demo and the e2e
// tests: N "nodes" on one machine, each a folder with a kubelet-like
// supervisor (see package supervisor) running the node's static pods (etcd,
// later the agent), a real kube-apiserver whose storage is that etcd cluster,
// and fault verbs to break it. Everything listens on 127.0.0.0/8 with free
// ports, and every process started is recorded by PID in lab.json so that
// `lab down` stops exactly those.
package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
)

// SpecFile is the lab's description, written in the lab dir by Up.
const SpecFile = "lab.json"

// Spec is lab.json: everything a person or a test needs to reach the lab.
type Spec struct {
	Dir          string     `json:"dir"`
	ClusterToken string     `json:"clusterToken"`
	BinDir       string     `json:"binDir"`
	EtcdBinary   string     `json:"etcdBinary,omitempty"` // instead of binDir/etcd
	AgentBinary  string     `json:"agentBinary"`
	LabBinary    string     `json:"labBinary"`
	AgentArgs    []string   `json:"agentArgs,omitempty"`
	Failpoints   []string   `json:"failpoints,omitempty"` // Options.Failpoints
	Agents       bool       `json:"agents"`
	CreatedAt    time.Time  `json:"createdAt"`
	Nodes        []Node     `json:"nodes"`
	APIServer    *APIServer `json:"apiServer,omitempty"`
	// EtcdTLS is set when the members serve TLS (client and peer).
	EtcdTLS *EtcdTLS `json:"etcdTLS,omitempty"`
	// EtcdQuotaBytes is the members' --quota-backend-bytes (0: etcd's
	// default, 2 GiB).
	EtcdQuotaBytes int64 `json:"etcdQuotaBytes,omitempty"`
	// EtcdNoPurge: the members run with --max-snapshots=0 --max-wals=0.
	EtcdNoPurge bool `json:"etcdNoPurge,omitempty"`
	// EtcdWALDir: the members run with a dedicated --wal-dir (Node.WALDir).
	EtcdWALDir bool `json:"etcdWALDir,omitempty"`
	// DataDirLayouts: Options.DataDirLayouts.
	DataDirLayouts []string `json:"dataDirLayouts,omitempty"`
	// PeerProxy: each member advertises a peer URL served by a proxy in the
	// process that ran Up (see peerproxy.go), which Partition can cut.
	PeerProxy bool `json:"peerProxy,omitempty"`
	// DiskLimit is the size in bytes of each node's tmpfs DiskDir (0: none).
	DiskLimit int64 `json:"diskLimit,omitempty"`
	// DiskMounts are the tmpfs mounts this lab made (unmounted by Down).
	DiskMounts []string `json:"diskMounts,omitempty"`
	// DiskFaultsUnavailable says why the disks could not be mounted.
	DiskFaultsUnavailable string `json:"diskFaultsUnavailable,omitempty"`
	// Management is set for a management lab (mgmt.go): a control-plane
	// node, worker nodes run by lab kubelets, real controllers, local PVs
	// and hosted etcd clusters as StatefulSets.
	Management *Management `json:"management,omitempty"`
	// RealNode is the node the real kubelet runs (Options.RealNode).
	RealNode *RealNode `json:"realNode,omitempty"`
	// SnapshotStore is the agents' --snapshot-store (snapshotstore.go).
	SnapshotStore *SnapshotStore `json:"snapshotStore,omitempty"`
}

// Node is one lab node: its own loopback IP, manifests dir, local disk and
// supervisor.
type Node struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
	// Member is the etcd member name of the static pod this node was created
	// with ("" for a node added empty, until a manifest is placed on it).
	Member    string `json:"member,omitempty"`
	ClientURL string `json:"clientURL,omitempty"`
	PeerURL   string `json:"peerURL,omitempty"`
	// PeerListenURL is where etcd listens for peers when PeerURL is the
	// node's peer proxy ("" without a proxy: etcd listens on PeerURL).
	PeerListenURL string `json:"peerListenURL,omitempty"`
	// MetricsURL is etcd's --listen-metrics-urls (the gate's stop watch
	// counts requests in flight there).
	MetricsURL string `json:"metricsURL,omitempty"`
	// EtcdBinary is the etcd this node's member runs ("": Spec.EtcdBinary,
	// else binDir/etcd): a lab of mixed etcd versions (Options.EtcdBinaries,
	// SetMemberVersion).
	EtcdBinary string `json:"etcdBinary,omitempty"`
	NodeDir    string `json:"nodeDir"`
	DiskDir    string `json:"diskDir"`
	DataDir    string `json:"dataDir,omitempty"`
	// DataDirLayout is how DataDir is laid out (LayoutSubdir,
	// LayoutMountPoint, LayoutSymlink).
	DataDirLayout string `json:"dataDirLayout,omitempty"`
	// WALDir is the member's dedicated --wal-dir ("" when in the data dir).
	WALDir          string `json:"walDir,omitempty"`
	ManifestsDir    string `json:"manifestsDir"`
	LogsDir         string `json:"logsDir"`
	StateDir        string `json:"stateDir"`
	SupervisorPID   int    `json:"supervisorPID"`
	AgentMetricsURL string `json:"agentMetricsURL,omitempty"`
	Lost            bool   `json:"lost,omitempty"`
	// AgentArgs are this node's agent flags, after the lab's (a later flag wins).
	AgentArgs []string `json:"agentArgs,omitempty"`
	// Worker: a management lab's worker node, whose supervisor is also its
	// lab kubelet (it registers the Node and runs the API pods bound to it).
	Worker bool `json:"worker,omitempty"`
	// Real: the real kubelet runs this node (Spec.RealNode), not `lab
	// supervise`; its paths above are the lab's view of the node's own.
	Real bool `json:"real,omitempty"`
}

// PVDir is the folder under which the node's local PVs live.
func (n Node) PVDir() string { return filepath.Join(n.DiskDir, "pv") }

// APIServer is the lab's kube-apiserver.
type APIServer struct {
	URL        string   `json:"url"`
	Kubeconfig string   `json:"kubeconfig"`
	Token      string   `json:"token"`
	PID        int      `json:"pid"`
	Dir        string   `json:"dir"`
	LogFile    string   `json:"logFile"`
	Args       []string `json:"args"`
	// kubeconfigs of the token file's extra identities (Up only).
	kubeconfigs map[string]string
}

// PeerListen is the URL the node's etcd listens on for peers.
func (n Node) PeerListen() string {
	if n.PeerListenURL != "" {
		return n.PeerListenURL
	}
	return n.PeerURL
}

// SupervisorStateFile is where a node's supervisor publishes its containers.
func (n Node) SupervisorStateFile() string { return filepath.Join(n.NodeDir, "supervisor.json") }

// EtcdManifest is the path of the node's etcd static-pod manifest.
func (n Node) EtcdManifest() string { return filepath.Join(n.ManifestsDir, "etcd.yaml") }

// Node returns the node called name.
func (s *Spec) Node(name string) (*Node, error) {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return &s.Nodes[i], nil
		}
	}
	return nil, fmt.Errorf("no node %q in lab %s", name, s.Dir)
}

// ClientURLs lists the client URLs of the nodes' etcd members that are not lost.
func (s *Spec) ClientURLs() []string {
	var out []string
	for _, n := range s.Nodes {
		if n.ClientURL != "" && !n.Lost {
			out = append(out, n.ClientURL)
		}
	}
	return out
}

// LoadSpec reads dir/lab.json.
func LoadSpec(dir string) (*Spec, error) {
	b, err := os.ReadFile(filepath.Join(dir, SpecFile))
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("no lab at %s (no %s): run `etcd-agent-lab up --dir %s` first", dir, SpecFile, dir)
		}
		return nil, err
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, SpecFile), err)
	}
	return &s, nil
}

func (s *Spec) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(s.Dir, SpecFile), append(b, '\n'), 0o644)
}

// etcdBinary is the etcd the members run.
func (s *Spec) etcdBinary() string {
	if s.EtcdBinary != "" {
		return s.EtcdBinary
	}
	return filepath.Join(s.BinDir, "etcd")
}
