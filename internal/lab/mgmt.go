package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/pin"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Management describes a management lab: etcd clusters as StatefulSet pods
// on node-local PVs, the setting of the first request (docs/design.md §11).
type Management struct {
	// ControlPlaneNode runs the API's own etcd as a static pod; it is no
	// Node in the API (nothing is scheduled there).
	ControlPlaneNode  string   `json:"controlPlaneNode"`
	ControllerManager *Process `json:"controllerManager,omitempty"`
	Scheduler         *Process `json:"scheduler,omitempty"`
	PodIPSalt         string   `json:"podIPSalt"`
	HostedClusters    []string `json:"hostedClusters,omitempty"` // namespaces
	HostedReplicas    int      `json:"hostedReplicas,omitempty"` // members per hosted cluster (0: 3)
	// HostedLayouts: each hosted cluster's data dir layout (hostedlayout.go;
	// missing: HostedLayoutSubdir), by namespace.
	HostedLayouts map[string]string `json:"hostedLayouts,omitempty"`
	// HostedTLS: the hosted clusters that serve TLS (hostedtls.go), by
	// namespace.
	HostedTLS map[string]bool `json:"hostedTLS,omitempty"`
	// Kubeconfigs by identity: the controller-manager's, the scheduler's,
	// and one per possible worker (system:node:node1..9; the API server
	// reads its token file once, so every node's is made up front).
	Kubeconfigs map[string]string `json:"kubeconfigs,omitempty"`
}

// Process is a control-plane process the lab started.
type Process struct {
	PID     int      `json:"pid"`
	LogFile string   `json:"logFile"`
	Args    []string `json:"args"`
}

// Heartbeat of the lab kubelets, and the node-lifecycle controller's grace:
// a lost node is NotReady and tainted some 20 s after its last heartbeat.
const (
	kubeletHeartbeat  = 2 * time.Second
	nodeMonitorGrace  = 20 * time.Second
	controlPlaneNode  = "cp"
	controlPlaneIP    = "127.0.0.10"
	defaultPVsPerNode = 3
)

func validateManagement(o Options) error {
	switch {
	case o.EtcdTLS, o.PeerProxy, o.DiskLimit > 0, o.NoAPIServer:
		return errors.New("a management lab runs without etcd TLS, peer proxies, disk limits, and always with an API server")
	case o.HostedClusters < 0 || o.HostedClusters > 200:
		return fmt.Errorf("hosted clusters must be 0..200, got %d", o.HostedClusters)
	case o.HostedReplicas < 0 || o.HostedReplicas > o.Nodes:
		return fmt.Errorf("hosted replicas must be 0 (%d) .. the worker count %d (one member per node), got %d", HostedEtcdReplicas, o.Nodes, o.HostedReplicas)
	case o.PVsPerNode < 0:
		return fmt.Errorf("PVs per node must not be negative, got %d", o.PVsPerNode)
	}
	return nil
}

// upManagement brings up a management lab: the API's etcd on the
// control-plane node, kube-apiserver (Node and RBAC authorization,
// NodeRestriction), the real controller-manager and scheduler, a lab kubelet
// per worker, local PVs and the hosted etcd clusters.
func (l *Lab) upManagement(ctx context.Context, o Options) error {
	spec := l.Spec
	m := &Management{ControlPlaneNode: controlPlaneNode, PodIPSalt: spec.ClusterToken, Kubeconfigs: map[string]string{}, HostedReplicas: o.HostedReplicas}
	spec.Management = m
	cp, err := l.newNamedNode(controlPlaneNode, controlPlaneIP, true)
	if err != nil {
		return err
	}
	spec.Nodes = append(spec.Nodes, cp)
	man, err := etcdPodManifest(spec, cp, initialCluster(spec.Nodes), "new", spec.ClusterToken, nil, nil)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cp.EtcdManifest(), man, 0o644); err != nil {
		return err
	}
	if err := l.startSupervisor(&spec.Nodes[0]); err != nil {
		return err
	}
	if err := spec.save(); err != nil {
		return err
	}
	start := time.Now()
	if err := l.WaitHealthy(ctx, 1, 60*time.Second); err != nil {
		return err
	}
	var nodes []string
	for i := 1; i <= 9; i++ {
		nodes = append(nodes, fmt.Sprintf("node%d", i))
	}
	a, err := l.startNodeAuthorizerAPIServer(ctx, nil, start, nodes...)
	if err != nil {
		return err
	}
	m.Kubeconfigs = a.kubeconfigs
	if err := spec.save(); err != nil {
		return err
	}
	if err := l.startControlPlane(ctx, m.Kubeconfigs, &m.ControllerManager, &m.Scheduler); err != nil {
		return err
	}
	for i := 1; i <= o.Nodes; i++ {
		n, err := l.newNode(i, false)
		if err != nil {
			return err
		}
		if _, err := l.addWorker(ctx, n); err != nil {
			return err
		}
	}
	if err := l.WaitNodesReady(ctx, 90*time.Second); err != nil {
		return err
	}
	if err := l.startPodAgents(ctx); err != nil {
		return err
	}
	pvs := o.PVsPerNode
	if pvs == 0 {
		pvs = max(defaultPVsPerNode, o.HostedClusters+1)
	}
	if err := l.createLocalStorage(ctx, pvs); err != nil {
		return err
	}
	for i := range o.HostedClusters {
		if i < len(o.HostedLayouts) && o.HostedLayouts[i] != HostedLayoutSubdir {
			if spec.Management.HostedLayouts == nil {
				spec.Management.HostedLayouts = map[string]string{}
			}
			spec.Management.HostedLayouts[hostedNamespace(i)] = o.HostedLayouts[i]
		}
		if i < len(o.HostedTLS) && o.HostedTLS[i] {
			if spec.Management.HostedTLS == nil {
				spec.Management.HostedTLS = map[string]bool{}
			}
			spec.Management.HostedTLS[hostedNamespace(i)] = true
		}
		if err := l.CreateHostedCluster(ctx, hostedNamespace(i)); err != nil {
			return err
		}
	}
	if err := l.WaitHostedClustersHealthy(ctx, 3*time.Minute); err != nil {
		return err
	}
	if err := l.waitHostedPinned(ctx, 60*time.Second); err != nil {
		return err
	}
	l.log.Info("management lab up", zap.Int("workers", o.Nodes), zap.Int("hostedClusters", o.HostedClusters), zap.Duration("took", time.Since(start)))
	return spec.save()
}

// addWorker starts node n's supervisor as its lab kubelet; the kubelet
// registers the Node itself.
func (l *Lab) addWorker(ctx context.Context, n Node) (*Node, error) {
	n.Worker = true
	kubeconfig, ok := l.Spec.Management.Kubeconfigs["system:node:"+n.Name]
	if !ok {
		return nil, fmt.Errorf("no kubelet identity for %s (a management lab has node1..node9)", n.Name)
	}
	argv := []string{l.Spec.LabBinary, "supervise", "--node-dir", n.NodeDir, "--log-format", "json",
		"--kubeconfig", kubeconfig, "--node-name", n.Name, "--node-ip", n.IP, "--pod-ip-salt", l.Spec.Management.PodIPSalt,
		"--heartbeat", kubeletHeartbeat.String()}
	if err := os.MkdirAll(n.PVDir(), 0o755); err != nil {
		return nil, err
	}
	proc, err := startDetached(argv, filepath.Join(n.LogsDir, "supervisor.log"))
	if err != nil {
		return nil, err
	}
	n.SupervisorPID = proc.PID
	if l.Spec.Agents {
		if err := l.writeAgentManifest(&n); err != nil {
			return nil, err
		}
	}
	l.Spec.Nodes = append(l.Spec.Nodes, n)
	if err := l.Spec.save(); err != nil {
		return nil, err
	}
	l.log.Info("added worker node", zap.String("node", n.Name), zap.String("ip", n.IP))
	return &l.Spec.Nodes[len(l.Spec.Nodes)-1], nil
}

// Workers lists the management lab's worker nodes.
func (l *Lab) Workers() []Node {
	var out []Node
	for _, n := range l.Spec.Nodes {
		if n.Worker {
			out = append(out, n)
		}
	}
	return out
}

// WaitNodesReady waits until every live worker's Node is Ready.
func (l *Lab) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, n := range l.Workers() {
			if n.Lost {
				continue
			}
			node, err := kc.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				last = err
				return false, nil
			}
			if !NodeReady(node) {
				last = fmt.Errorf("node %s is not Ready", n.Name)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not ready after %s: %v", timeout, last)
	}
	return nil
}

// NodeReady reports the Node's Ready condition.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ignoreExists treats AlreadyExists as done (a create retried).
func ignoreExists(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// startPodAgents (with Agents) creates the agents' namespace, and waits
// until every worker's agent (placed with its lab kubelet) serves /readyz.
func (l *Lab) startPodAgents(ctx context.Context) error {
	if !l.Spec.Agents {
		return nil
	}
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AgentNamespace}}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return fmt.Errorf("create namespace %s: %w", AgentNamespace, err)
	}
	for _, n := range l.Workers() {
		if err := waitAgentReady(ctx, n, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// waitHostedPinned (with Agents) waits until the agent on each hosted
// member's node has pinned the member (seen it serve): from then on its
// start gate knows the member existed.
func (l *Lab) waitHostedPinned(ctx context.Context, timeout time.Duration) error {
	if !l.Spec.Agents {
		return nil
	}
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range l.Spec.Management.HostedClusters {
			for i := range l.HostedReplicas() {
				name := fmt.Sprintf("%s-%d", HostedEtcdName, i)
				p, err := kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					last = err
					return false, nil
				}
				n, err := l.Spec.Node(p.Spec.NodeName)
				if err != nil {
					last = fmt.Errorf("%s/%s: %w", ns, name, err)
					return false, nil
				}
				if _, ok, err := pin.Load(HostedMemberStateDir(*n, ns, name), name); err != nil || !ok {
					last = fmt.Errorf("%s/%s not pinned by the agent on %s yet (%v)", ns, name, n.Name, err)
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("hosted members not pinned after %s: %v", timeout, last)
	}
	return nil
}

// HostedMemberStateDir is where node n's agent keeps the hosted member
// pod's state (agent.MemberStateDir under the node's agent state dir).
func HostedMemberStateDir(n Node, namespace, pod string) string {
	return filepath.Join(n.StateDir, "members", namespace+"_"+pod)
}
