package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/realnode"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upWithRealNode is Up for a lab whose last node is real (Options.RealNode).
// The stand-ins start first; the API server starts as soon as they have
// quorum (the real node's kubelet needs it to register, and runs its etcd
// static pod before that); then the real node starts and its member joins.
func (l *Lab) upWithRealNode(ctx context.Context, o Options) error {
	spec := l.Spec
	if why := RealNodeUnavailable(o.BinDir); why != "" {
		return errors.New(why)
	}
	if !o.EtcdTLS || o.PeerProxy || o.EtcdWALDir || len(o.DataDirLayouts) > 0 || o.DiskLimit > 0 || o.NoAPIServer {
		return errors.New("a real node needs EtcdTLS, the API server, and none of PeerProxy, EtcdWALDir, DataDirLayouts, DiskLimit")
	}
	if o.Nodes < 3 {
		return fmt.Errorf("a real node needs at least 3 nodes (the stand-ins keep quorum while it starts), got %d", o.Nodes)
	}
	name := fmt.Sprintf("node%d", o.Nodes)
	r := &RealNode{Name: name, HostLink: "eal" + spec.ClusterToken[len(spec.ClusterToken)-6:],
		CgroupRoot: "etcd-agent-" + spec.ClusterToken, AgentEnv: o.RealNodeAgentEnv}
	spec.RealNode = r
	var err error
	if r.HostIP, r.NodeIP, err = pickRealNodeNet(r.HostLink); err != nil {
		return err
	}
	if err := spec.save(); err != nil {
		return err
	}
	if spec.EtcdTLS, err = writeEtcdPKI(filepath.Join(spec.Dir, "pki", "etcd"), r.NodeIP); err != nil {
		return fmt.Errorf("lab etcd PKI: %w", err)
	}
	for i := 1; i <= o.Nodes; i++ {
		var n Node
		if i == o.Nodes {
			n, err = l.newRealNode(i, r.NodeIP)
		} else {
			n, err = l.newNode(i, true)
		}
		if err != nil {
			return err
		}
		spec.Nodes = append(spec.Nodes, n)
	}
	ic := initialCluster(spec.Nodes)
	for _, n := range spec.Nodes {
		var m []byte
		if n.Real {
			if err := l.writeRealNodePKI(n); err != nil {
				return err
			}
			m, err = realNodeEtcdManifest(n, ic, spec.ClusterToken)
		} else {
			m, err = etcdPodManifest(spec, n, ic, "new", spec.ClusterToken, l.gateCommand(n), spec.EtcdTLS)
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(n.EtcdManifest(), m, 0o644); err != nil {
			return err
		}
	}
	for i := range spec.Nodes {
		if !spec.Nodes[i].Real {
			if err := l.startSupervisor(&spec.Nodes[i]); err != nil {
				return err
			}
		}
	}
	if err := spec.save(); err != nil {
		return err
	}
	start := time.Now()
	// On the stand-ins' quorum: the real node's member joins later.
	a, err := l.startNodeAuthorizerAPIServer(ctx, spec.EtcdTLS, start, name)
	if err != nil {
		return err
	}
	if err := l.startControlPlane(ctx, a.kubeconfigs, &r.ControllerManager, &r.Scheduler); err != nil {
		return err
	}
	if err := l.bootstrapObjects(ctx); err != nil {
		return err
	}
	if err := l.startRealNode(ctx); err != nil {
		return err
	}
	if err := l.WaitHealthy(ctx, len(spec.Nodes), 120*time.Second); err != nil {
		return err
	}
	l.log.Info("etcd cluster healthy, the real node's member too", zap.Duration("took", time.Since(start)))
	if err := l.startAgents(ctx); err != nil {
		return err
	}
	return spec.save()
}

// startRealNode writes the node's configs, sets what kubelet needs on the
// machine (sysctls, cgroup root), starts the node process and waits until
// its Node is Ready.
func (l *Lab) startRealNode(ctx context.Context) error {
	spec, r := l.Spec, l.Spec.RealNode
	n, err := spec.Node(r.Name)
	if err != nil {
		return err
	}
	if err := r.makeCgroupRoot(); err != nil {
		return err
	}
	if err := r.saveAndSetSysctls(); err != nil {
		return err
	}
	if err := spec.save(); err != nil {
		return err
	}
	kubeconfig := spec.APIServer.kubeconfigs["system:node:"+r.Name]
	caFile := filepath.Join(spec.APIServer.Dir, "pki", "ca.crt")
	files := map[string]string{
		filepath.Join(n.NodeDir, "kubelet.yaml"):    kubeletConfig(r, caFile),
		filepath.Join(n.NodeDir, "containerd.toml"): containerdConfig(spec.BinDir),
	}
	for p, b := range files {
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			return err
		}
	}
	cfg := realnode.Config{NodeDir: n.NodeDir, BinDir: spec.BinDir, Images: realNodeImages(spec.BinDir),
		NodeIP: r.NodeIP, Prefix: 30, LoopbackIPs: []string{realNodeServiceIP}, Forwards: l.realNodeForwards(),
		KubeletArgs:      kubeletArgs(*n, kubeconfig, filepath.Join(n.NodeDir, "kubelet.yaml")),
		ContainerdConfig: filepath.Join(n.NodeDir, "containerd.toml")}
	if err := cfg.Save(); err != nil {
		return err
	}
	if err := l.startRealNodeProcess(n); err != nil {
		return err
	}
	return l.waitNodeReady(ctx, r.Name, 120*time.Second)
}

// waitNodeReady waits until Node name is Ready (as its kubelet reports).
func (l *Lab) waitNodeReady(ctx context.Context, name string, timeout time.Duration) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	last := "not registered"
	for {
		if node, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		}
		if r := l.Spec.RealNode; r != nil && !procAlive(r.PID, "") {
			return fmt.Errorf("the real node's process exited; see %s", filepath.Join(l.Spec.Dir, name, "logs"))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready after %s (%s); see %s", name, timeout, last, filepath.Join(l.Spec.Dir, name, "logs"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
