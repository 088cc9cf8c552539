package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// runAgentsAsShippedManagementRBAC restarts a management lab's agents as the
// DaemonSet's ServiceAccount (a real token from the TokenRequest API) bound
// only to the shipped RBAC: the base's, the management overlay's, and the
// writer role bound in each hosted namespace as deploy/overlays/management
// says. The scenario that follows proves the grant sufficient; the checks
// here prove it tight.
func runAgentsAsShippedManagementRBAC(t *testing.T, l *lab.Lab, kc kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	for _, f := range []string{"daemonset/serviceaccount.yaml", "daemonset/rbac.yaml", "overlays/management/rbac-management.yaml",
		"daemonset/node-scope-policy.yaml", "overlays/management/member-scope-policy.yaml"} {
		applyShipped(t, kc, filepath.Join(repoRoot, "deploy", f))
	}
	for _, ns := range l.Spec.Management.HostedClusters {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "etcd-agent-members", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "etcd-agent-member-writer"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "etcd-agent", Namespace: lab.AgentNamespace}}}
		if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	saKubeconfig := serviceAccountKubeconfig(t, l, kc)
	sa := saClient(t, saKubeconfig)
	// Tight: no pod deletions where the writer is not bound, no PV
	// deletions, no Secrets.
	if err := sa.CoreV1().Pods("default").Delete(ctx, "any", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("deleting a pod outside the hosted namespaces: %v, want Forbidden", err)
	}
	if err := sa.CoreV1().PersistentVolumes().Delete(ctx, "any", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("deleting a PV: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "any"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("creating a ConfigMap outside the hosted namespaces: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Secrets(l.Spec.Management.HostedClusters[0]).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing Secrets: %v, want Forbidden", err)
	}
	// Each agent with a token bound to its own node: the shipped node,
	// lease, member and PV scope policies judge every write.
	kubeconfigs := runAgentsWithNodeBoundTokens(t, l, kc)
	var a, b string
	for n := range kubeconfigs {
		if a == "" {
			a = n
		} else if b == "" {
			b = n
		}
	}
	agentOfA := saClient(t, kubeconfigs[a])
	waitNodeScopeInForce(t, kc, agentOfA, b)
	waitMemberScopeInForce(t, l, kc, agentOfA, b)
	t.Logf("agents run as ServiceAccount %s/etcd-agent with only the shipped RBAC and admission policies, each token bound to its node", lab.AgentNamespace)
}

// waitMemberScopeInForce: node a's agent may not annotate a member pod on
// node b, a Ready node (the policy judges by the pod's Node).
func waitMemberScopeInForce(t *testing.T, l *lab.Lab, kc, agentOfA kubernetes.Interface, b string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var pod *corev1.Pod
	for _, ns := range l.Spec.Management.HostedClusters {
		pods, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + b})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					pod = &pods.Items[i]
				}
			}
		}
	}
	if pod == nil {
		t.Fatalf("no Ready member pod on %s to probe the member-scope policy with", b)
	}
	patch := func(kc kubernetes.Interface, v string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := kc.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType,
				[]byte(fmt.Sprintf(`{"metadata":{"annotations":{"etcd-agent.io/scope-probe":%s}}}`, v)), metav1.PatchOptions{})
			return err
		}
	}
	waitPolicyInForce(t, "etcd-agent-member-scope", patch(agentOfA, `"x"`), patch(kc, "null"))
}
