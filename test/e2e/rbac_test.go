package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
)

// TestHealRunsWithOnlyTheShippedRBAC runs the agents as the DaemonSet's
// ServiceAccount (real tokens from the TokenRequest API, each bound to a pod
// on its agent's node), bound only to the shipped Role and ClusterRole and
// judged by the shipped node-scope policies: the wipe heal must still
// succeed (the grant is sufficient) and an action outside it must be denied
// (the grant is tight).
func TestHealRunsWithOnlyTheShippedRBAC(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true})
	ctx := context.Background()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"serviceaccount.yaml", "rbac.yaml", "node-scope-policy.yaml"} {
		applyShipped(t, kc, filepath.Join(repoRoot, "deploy", "daemonset", f))
	}
	saKubeconfig := serviceAccountKubeconfig(t, l, kc)
	// Tight: the ServiceAccount may not touch Leases elsewhere or delete Nodes.
	sa := saClient(t, saKubeconfig)
	_, err = sa.CoordinationV1().Leases("default").Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "not-ours"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("creating a Lease in another namespace: %v, want Forbidden", err)
	}
	if err := sa.CoreV1().Nodes().Delete(ctx, "node1", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("deleting a Node: %v, want Forbidden", err)
	}
	// Each agent with a token bound to its own node, the node-scope and
	// lease-scope policies judging every write.
	kubeconfigs := runAgentsWithNodeBoundTokens(t, l, kc)
	waitNodeScopeInForce(t, kc, saClient(t, kubeconfigs["node1"]), "node2")
	pid, err := l.AgentPID("node2")
	if err != nil {
		t.Fatal(err)
	}
	if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); !bytes.Contains(cmdline, []byte(kubeconfigs["node2"])) {
		t.Fatalf("node2's agent does not run with its node-bound ServiceAccount kubeconfig: %q", cmdline)
	}
	// Sufficient: the wipe heal succeeds with nothing but the shipped grant.
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ensureNotLeader(t, l, "node2")
	chk, err := invariant.Start(ctx, kc, cli)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := l.WipeDataDir("node2"); err != nil {
		t.Fatal(err)
	}
	n2, _ := l.Spec.Node("node2")
	eventually(t, 3*time.Minute, "node2 healed as the ServiceAccount", func() error {
		rec, ok, err := journal.Load(n2.StateDir, n2.Member)
		if err != nil || !ok || rec.Phase != journal.PhaseDone || !rec.StartedAt.After(start) {
			return fmt.Errorf("journal %+v %v", rec.Phase, err)
		}
		if rec.Result != journal.ResultSucceeded {
			t.Fatalf("recovery %s: %s %s", rec.Result, rec.Reason, rec.Message)
		}
		return nil
	})
	if err := l.WaitHealthy(ctx, 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	rep, err := chk.Finish(ctx, invariant.Options{LeaderHandOffs: leaderHandOffs(t, l)})
	t.Logf("healed as the ServiceAccount in %s; invariants: %s", time.Since(start).Round(time.Millisecond), rep)
	if err != nil {
		t.Fatal(err)
	}
	// The Events and the last-recovery annotation were written by the ServiceAccount too.
	evs, err := kc.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node2"})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs.Items {
		reasons = append(reasons, e.Reason)
	}
	if !strings.Contains(strings.Join(reasons, ","), "RecoverySucceeded") {
		t.Fatalf("no RecoverySucceeded Event on node2: %v", reasons)
	}
}

// applyShipped creates the objects of a shipped manifest file as they are.
func applyShipped(t *testing.T, kc kubernetes.Interface, path string) {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = kc.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = kc.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = kc.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = kc.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = kc.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = kc.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = kc.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("%s: unexpected %T", path, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", path, err)
		}
	}
}

// serviceAccountKubeconfig writes a kubeconfig for the lab's API that
// authenticates as the agent's ServiceAccount (a TokenRequest token).
func serviceAccountKubeconfig(t *testing.T, l *lab.Lab, kc kubernetes.Interface) string {
	t.Helper()
	tok, err := kc.CoreV1().ServiceAccounts(lab.AgentNamespace).CreateToken(context.Background(), "etcd-agent",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tokenKubeconfig(t, l, tok.Status.Token, "kubeconfig-serviceaccount")
}

// tokenKubeconfig writes the lab API's kubeconfig with token as its only
// credential to name in the lab's dir.
func tokenKubeconfig(t *testing.T, l *lab.Lab, token, name string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(l.Spec.APIServer.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Token, ai.ClientCertificateData, ai.ClientKeyData, ai.ClientCertificate, ai.ClientKey = token, nil, nil, "", ""
	}
	path := filepath.Join(l.Spec.Dir, name)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func saClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }
