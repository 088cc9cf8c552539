package e2e

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	for _, f := range []string{"daemonset/serviceaccount.yaml", "daemonset/rbac.yaml", "overlays/management/rbac-management.yaml"} {
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
	if err := l.RestartAgents(ctx, "--kubeconfig="+saKubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Logf("agents run as ServiceAccount %s/etcd-agent with only the shipped RBAC", lab.AgentNamespace)
}
