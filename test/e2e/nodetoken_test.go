package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// The agents as the DaemonSet runs them, for the shipped admission policies
// (deploy/daemonset/node-scope-policy.yaml, and the management overlay's
// member-scope-policy.yaml) to judge: each agent's token is the agent
// ServiceAccount's, bound to a pod on the agent's own node, so that the API
// server names that node in every request (docs/security.md). The lab runs
// its agents as static pods the API does not know; a pod of the
// ServiceAccount on each node (it sleeps) is what each token is bound to.

// runAgentsWithNodeBoundTokens restarts every running agent with a token
// bound to its own node and returns their kubeconfigs by node.
func runAgentsWithNodeBoundTokens(t *testing.T, l *lab.Lab, kc kubernetes.Interface) map[string]string {
	t.Helper()
	out := map[string]string{}
	// Sufficient: the scenario's every write passed the policies (a
	// denied one is retried, so the scenario alone could still pass).
	t.Cleanup(func() { assertNoAgentWasDenied(t, l) })
	for _, n := range l.Spec.Nodes {
		if !l.RunsAgent(n) {
			continue
		}
		out[n.Name] = runAgentWithNodeBoundToken(t, l, kc, n.Name)
	}
	return out
}

// runAgentWithNodeBoundToken restarts node's agent with a token bound to a
// pod on node and returns its kubeconfig.
func runAgentWithNodeBoundToken(t *testing.T, l *lab.Lab, kc kubernetes.Interface, node string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-agent-token-" + node, Namespace: lab.AgentNamespace},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "etcd-agent", AutomountServiceAccountToken: ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers:                    []corev1.Container{{Name: "token-holder", Image: "etcd-agent.invalid/none", Command: []string{"sleep", "infinity"}}}}}
	p, err := kc.CoreV1().Pods(lab.AgentNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		p, err = kc.CoreV1().Pods(lab.AgentNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	tok, err := kc.CoreV1().ServiceAccounts(lab.AgentNamespace).CreateToken(ctx, "etcd-agent", &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(2 * 3600)),
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := tokenKubeconfig(t, l, tok.Status.Token, "kubeconfig-agent-"+node)
	// The API server's own word on who the token is.
	rev, err := saClient(t, path).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rev.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != node {
		t.Fatalf("%s's agent token names node %v", node, got)
	}
	if err := l.RestartAgent(ctx, node, "--kubeconfig="+path); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitPolicyInForce waits until the API server denies, by the named
// admission policy, a write that policy must deny (it compiles a new policy
// a moment after it is created), and undoes the write if it was let through
// before.
func waitPolicyInForce(t *testing.T, policy string, write, undo func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = write(ctx)
		if last == nil {
			if err := undo(ctx); err != nil {
				return false, err
			}
		}
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), "'"+policy+"'"), nil
	})
	if err != nil {
		t.Fatalf("admission policy %s is not in force: the write it must deny answered %v (%v)", policy, last, err)
	}
}

// waitNodeScopeInForce: node a's agent may not annotate node b.
func waitNodeScopeInForce(t *testing.T, kc kubernetes.Interface, agentOfA kubernetes.Interface, b string) {
	t.Helper()
	patch := func(kc kubernetes.Interface, v string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := kc.CoreV1().Nodes().Patch(ctx, b, types.MergePatchType,
				[]byte(fmt.Sprintf(`{"metadata":{"annotations":{"etcd-agent.io/scope-probe":%s}}}`, v)), metav1.PatchOptions{})
			return err
		}
	}
	waitPolicyInForce(t, "etcd-agent-node-scope", patch(agentOfA, `"x"`), patch(kc, "null"))
}

// assertNoAgentWasDenied: no agent of the lab logged a request the API
// server denied it (internal/agent's apidenied.go: RBAC or a policy).
func assertNoAgentWasDenied(t *testing.T, l *lab.Lab) {
	t.Helper()
	for _, n := range l.Spec.Nodes {
		path := agentLog(t, l, n.Name)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		for _, e := range logEntries(t, path, "the Kubernetes API denied the agent a request") {
			t.Errorf("%s's agent was denied %v %v (%v)", n.Name, e["verb"], e["resource"], e["path"])
		}
	}
}
