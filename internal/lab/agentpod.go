package lab

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Lab agents run with short timings so that scenarios take seconds; the
// product's defaults (poll 5 s, grace 60 s) stay production-sane.
const (
	LabPollInterval = "1s"
	LabGracePeriod  = "3s"
	// LabNodeLostGrace: how long a worker must be NotReady with its node
	// Lease unrenewed before the steward frees its members' places.
	LabNodeLostGrace = "15s"
	// LabPeerProbeInterval: how long a worker's routine polls reuse the
	// last full probe: twelve polls, as the product's 60 s are at 5 s.
	LabPeerProbeInterval = "12s"
)

// AgentManifest is the agent's static-pod manifest on a node.
func (n Node) AgentManifest() string { return filepath.Join(n.ManifestsDir, "etcd-agent.yaml") }

// agentArgs is the command line of node n's agent.
func (l *Lab) agentArgs(n *Node) ([]string, error) {
	if n.AgentMetricsURL == "" {
		ports, err := freePorts(n.IP, 1)
		if err != nil {
			return nil, err
		}
		n.AgentMetricsURL = fmt.Sprintf("http://%s:%d/metrics", n.IP, ports[0])
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(n.AgentMetricsURL, "http://"), "/metrics")
	args := []string{l.Spec.AgentBinary, "run",
		"--node-name=" + n.Name,
		"--state-dir=" + n.StateDir,
		"--metrics-addr=" + addr,
		"--poll-interval=" + LabPollInterval,
		"--grace-period=" + LabGracePeriod,
		"--retry-backoff=2s",
		"--learner-stall-timeout=30s",
		"--recovery-timeout=3m",
		"--lease-ttl=15s",
		"--namespace=" + AgentNamespace,
		"--log-format=json",
	}
	if n.Worker {
		// A management lab worker's agent serves the hosted etcd pods
		// bound to its node.
		// --kubelet-pods-dir: the lab kubelet's, where it writes the
		// pods' Secret volumes (hostedtls.go's certs).
		args = append(args, "--member-source=pods", "--pod-selector=app="+HostedEtcdName, "--node-lost-grace="+LabNodeLostGrace,
			"--peer-probe-interval="+LabPeerProbeInterval, "--kubelet-pods-dir="+filepath.Join(n.NodeDir, "pods"))
	} else {
		args = append(args, "--static-pod-manifest="+n.EtcdManifest(), "--endpoints="+strings.Join(l.Spec.ClientURLs(), ","))
	}
	if a := l.Spec.APIServer; a != nil {
		args = append(args, "--kubeconfig="+a.Kubeconfig)
	}
	if t := l.Spec.EtcdTLS; t != nil {
		args = append(args, t.agentFlags()...)
	}
	if s := l.Spec.SnapshotStore; s != nil {
		args = append(args, "--snapshot-store="+s.URL)
	}
	return append(append(args, l.Spec.AgentArgs...), n.AgentArgs...), nil
}

// writeAgentManifest places the agent's static pod on node n; its
// supervisor starts it (and restarts it when it exits, as a DaemonSet would).
func (l *Lab) writeAgentManifest(n *Node) error {
	args, err := l.agentArgs(n)
	if err != nil {
		return err
	}
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-agent-" + n.Name, Namespace: AgentNamespace, Labels: map[string]string{"app": "etcd-agent"}},
		Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{
			Name: "etcd-agent", Image: "etcd-agent:dev", Command: args,
			Env: l.agentEnv(n),
		}}},
	}
	b, err := yaml.Marshal(&pod)
	if err != nil {
		return err
	}
	return os.WriteFile(n.AgentManifest(), b, 0o644)
}

// agentEnv is the agent container's environment: its node, the snapshot
// store's credentials, and the test hooks turned on (Options.Failpoints).
func (l *Lab) agentEnv(n *Node) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: "NODE_NAME", Value: n.Name}}
	if len(l.Spec.Failpoints) > 0 {
		env = append(env, corev1.EnvVar{Name: "GOFAIL_FAILPOINTS", Value: strings.Join(l.Spec.Failpoints, ";")})
	}
	m := l.Spec.SnapshotStore.Env()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		env = append(env, corev1.EnvVar{Name: k, Value: m[k]})
	}
	return env
}

// AgentURL is the base URL of node n's agent (metrics, healthz, readyz).
func (n Node) AgentURL() string { return strings.TrimSuffix(n.AgentMetricsURL, "/metrics") }

// waitAgentReady polls the agent's /readyz until it answers 200.
func waitAgentReady(ctx context.Context, n Node, timeout time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second}
	if err := pollHTTPOK(ctx, c, n.AgentURL()+"/readyz", timeout, nil); err != nil {
		return fmt.Errorf("agent on %s: %w; see %s", n.Name, err, filepath.Join(n.LogsDir, "etcd-agent-"+n.Name+"_etcd-agent.log"))
	}
	return nil
}

// pollHTTPOK GETs url every 200 ms until it answers 200 or timeout passes;
// gone, if set, ends the wait early with its error (a process that exited).
func pollHTTPOK(ctx context.Context, c *http.Client, url string, timeout time.Duration, gone func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer c.CloseIdleConnections()
	var last error
	for {
		if gone != nil {
			if err := gone(); err != nil {
				return err
			}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %v", timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RestartAgents rewrites every agent's static pod with extra flags appended
// (a later flag wins) and waits until each node runs a new, ready agent
// process, as a DaemonSet rollout would.
func (l *Lab) RestartAgents(ctx context.Context, extra ...string) error {
	old := map[string]int{}
	for _, n := range l.Spec.Nodes {
		if st, err := readSupervisorState(n); err == nil {
			if c, ok := st.Container("etcd-agent.yaml", "etcd-agent"); ok {
				old[n.Name] = c.PID
			}
		}
	}
	l.Spec.AgentArgs = append(l.Spec.AgentArgs, extra...)
	for i := range l.Spec.Nodes {
		if !l.RunsAgent(l.Spec.Nodes[i]) {
			continue
		}
		if err := l.writeAgentManifest(&l.Spec.Nodes[i]); err != nil {
			return err
		}
	}
	if err := l.Spec.save(); err != nil {
		return err
	}
	for _, n := range l.Spec.Nodes {
		if !l.RunsAgent(n) {
			continue
		}
		if err := waitAgentRestarted(ctx, n, old[n.Name]); err != nil {
			return err
		}
	}
	return nil
}

// RunsAgent: a node that is not lost and runs an agent (in a management
// lab, the workers; the API's own etcd node runs none).
func (l *Lab) RunsAgent(n Node) bool {
	return !n.Lost && (l.Spec.Management == nil || n.Worker)
}

// RestartAgent rewrites node's agent static pod with extra flags after the
// lab's (replacing the extra flags of an earlier call; none restores the
// lab's) and waits until a new agent process is ready.
func (l *Lab) RestartAgent(ctx context.Context, node string, extra ...string) error {
	i := slices.IndexFunc(l.Spec.Nodes, func(n Node) bool { return n.Name == node })
	if i < 0 {
		return fmt.Errorf("no node %s", node)
	}
	old, _ := l.AgentPID(node)
	n := &l.Spec.Nodes[i]
	n.AgentArgs = slices.Clone(extra)
	if err := l.writeAgentManifest(n); err != nil {
		return err
	}
	if err := l.Spec.save(); err != nil {
		return err
	}
	return waitAgentRestarted(ctx, *n, old)
}

// waitAgentRestarted waits until n runs a ready agent process other than old.
func waitAgentRestarted(ctx context.Context, n Node, old int) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		st, err := readSupervisorState(n)
		if err != nil {
			return false, nil // being rewritten: read it again
		}
		c, ok := st.Container("etcd-agent.yaml", "etcd-agent")
		return ok && c.State == "running" && c.PID != old, nil
	})
	if err != nil {
		return fmt.Errorf("agent on %s not restarted after 60s: %w", n.Name, err)
	}
	return waitAgentReady(ctx, n, 60*time.Second)
}

// SignalAgent sends sig to the node's running agent (a fault: SIGKILL or
// SIGTERM at a random moment of a heal).
func (l *Lab) SignalAgent(node string, sig syscall.Signal) error {
	pid, err := l.AgentPID(node)
	if err != nil {
		return err
	}
	l.log.Info("fault: signal agent", zap.String("node", node), zap.Int("pid", pid), zap.Stringer("signal", sig))
	return signalOurs(pid, l.Spec.Dir, sig)
}

// AgentPID is the PID of node's running agent.
func (l *Lab) AgentPID(node string) (int, error) {
	return l.containerPID(node, "etcd-agent.yaml", "etcd-agent")
}

// StatusArgs are the arguments of `etcd-agent status` on node as its agent
// sees it (what `kubectl exec <its pod> -- etcd-agent status` runs with
// the DaemonSet's environment); for static-pod nodes.
func (l *Lab) StatusArgs(node string) ([]string, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return nil, err
	}
	if n.Worker {
		return nil, fmt.Errorf("node %s is a worker: its agent serves pods (status --member-source=pods)", node)
	}
	args := []string{"status", "--node-name=" + n.Name, "--state-dir=" + n.StateDir,
		"--static-pod-manifest=" + n.EtcdManifest(), "--endpoints=" + strings.Join(l.Spec.ClientURLs(), ",")}
	if a := l.Spec.APIServer; a != nil {
		args = append(args, "--kubeconfig="+a.Kubeconfig)
	}
	if t := l.Spec.EtcdTLS; t != nil {
		args = append(args, t.agentFlags()...)
	}
	return args, nil
}
