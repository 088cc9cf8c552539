package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

const fieldManager = "etcd-agent-deploy-test"

// warnings collects the API server's warnings (deprecations, Pod Security).
type warnings struct {
	mu  sync.Mutex
	got []string
}

func (w *warnings) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.got
	w.got = nil
	return out
}

// adminConfig is the lab's admin (system:masters) client config.
func adminConfig(t *testing.T, l *lab.Lab) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Spec.APIServer.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg
}

// applier server-side-applies rendered objects through the dynamic client.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.ResettableRESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

// resource is the API resource of o's kind, in o's namespace if it has one.
func (a *applier) resource(o *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", objectID(o), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace()), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

func (a *applier) apply(ctx context.Context, o *unstructured.Unstructured, dryRun bool) error {
	ri, err := a.resource(o)
	if err != nil {
		return err
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: ptr.To(true), FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts); err != nil {
		return fmt.Errorf("%s: %w", objectID(o), err)
	}
	return nil
}

// delete removes o (as applied by apply).
func (a *applier) delete(ctx context.Context, o *unstructured.Unstructured) error {
	ri, err := a.resource(o)
	if err != nil {
		return err
	}
	return ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{})
}

// installCRDs creates the test CRDs (ServiceMonitor, PrometheusRule, SCC)
// and waits until they are served.
func installCRDs(t *testing.T, ctx context.Context, a *applier) {
	t.Helper()
	crds, err := readObjects(repoPath("test", "deploy", "testdata", "crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds {
		if err := a.apply(ctx, crd, false); err != nil {
			t.Fatalf("install CRD: %v", err)
		}
	}
	crdRes := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, crd := range crds {
			got, err := a.dyn.Resource(crdRes).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			established := false
			for _, c := range conds {
				cm, _ := c.(map[string]any)
				if cm["type"] == "Established" && cm["status"] == "True" {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		a.mapper.Reset()
		for _, crd := range crds {
			group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
			if _, err := a.mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind}, "v1"); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("test CRDs not served: %v", err)
	}
}

var crdsOnce sync.Once

// TestManifestsServerSideDryRun applies every rendered object of every
// variant to the lab's real kube-apiserver as a server-side apply with
// dryRun=All and strict field validation: the API server's own validation
// and admission (Pod Security included) must accept them without a warning.
// Namespaces are applied for real first, so that the namespaced objects (and
// Pod Security, which reads the namespace's labels) see them.
func TestManifestsServerSideDryRun(t *testing.T) {
	l := sharedLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := adminConfig(t, l)
	w := &warnings{}
	cfg.WarningHandler = w
	a := newApplier(t, cfg)
	crdsOnce.Do(func() { installCRDs(t, ctx, a) })
	w.take()
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			objs := renderVariant(t, v)
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					if err := a.apply(ctx, o, false); err != nil {
						t.Fatalf("namespace: %v", err)
					}
				}
			}
			for _, o := range objs {
				if err := a.apply(ctx, o, true); err != nil {
					t.Errorf("server-side dry-run: %v", err)
				}
				if ws := w.take(); len(ws) > 0 {
					t.Errorf("%s: API server warnings: %v", objectID(o), ws)
				}
			}
			t.Logf("%d objects dry-run against kube-apiserver", len(objs))
		})
	}
	// The dry run persisted nothing.
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.AppsV1().DaemonSets(agentNamespace).Get(ctx, "etcd-agent", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry run created the DaemonSet (err %v)", err)
	}
}

// rbacObjects applies the base's ServiceAccount and RBAC objects for real.
func applyRBAC(t *testing.T, ctx context.Context, a *applier) {
	t.Helper()
	for _, o := range renderVariant(t, variants[0]) {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if err := a.apply(ctx, o, false); err != nil {
				t.Fatalf("apply: %v", err)
			}
		}
	}
}

// rbacLab is the shared lab with the shipped RBAC and node-scope policy
// applied for real, its admin config and client.
func rbacLab(t *testing.T) (*lab.Lab, *rest.Config, kubernetes.Interface) {
	t.Helper()
	l := sharedLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminConfig(t, l)
	applyRBAC(t, ctx, newApplier(t, admin))
	akc, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	return l, admin, akc
}

// agentIdentity is what the DaemonSet's pods authenticate as.
const agentIdentity = "system:serviceaccount:etcd-agent:etcd-agent"

// TestRBACEnforced binds only the shipped Role and ClusterRole (applied for
// real) and acts as the agent's ServiceAccount (impersonation from the lab's
// admin): what the agent needs is allowed, its neighbours are denied.
func TestRBACEnforced(t *testing.T) {
	l, admin, akc := rbacLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	sa := rest.CopyConfig(admin)
	sa.Impersonate = rest.ImpersonationConfig{UserName: agentIdentity,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:etcd-agent", "system:authenticated"},
		// As a token bound to a pod on the node says (node-scope-policy.yaml).
		Extra: map[string][]string{nodeNameExtra: {l.Spec.Nodes[0].Name}}}
	kc, err := kubernetes.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	node := l.Spec.Nodes[0].Name

	// RBAC bindings take effect through the authorizer's informers: wait
	// until the first allowed call succeeds.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the agent's identity cannot get its Node: %v", err)
	}

	allowed, denied := verdicts(t, "(Forbidden)", apierrors.IsForbidden)
	leases := kc.CoordinationV1().Leases(agentNamespace)
	newLease := func(name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node + "/" + node), LeaseDurationSeconds: ptr.To[int32](15)}}
	}

	t.Run("allowed", func(t *testing.T) {
		// Leases in the agent's namespace.
		created, err := leases.Create(ctx, newLease("rbac-test"), metav1.CreateOptions{})
		allowed("create Lease in etcd-agent", err)
		if err == nil {
			_, err = leases.Get(ctx, created.Name, metav1.GetOptions{})
			allowed("get Lease", err)
			created.Spec.HolderIdentity = ptr.To(node + "/" + node + "/steward") // its own node's (the lease-scope policy)
			_, err = leases.Update(ctx, created, metav1.UpdateOptions{})
			allowed("update Lease", err)
		}
		// Its Node: get, list, watch (the request trigger), patch annotations.
		_, err = kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
		allowed("list Nodes", err)
		nw, err := kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
		allowed("watch Nodes", err)
		if nw != nil {
			nw.Stop()
		}
		_, err = kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"etcd-agent.io/rbac-test":"ok"}}}`), metav1.PatchOptions{})
		allowed("patch Node", err)
		// Events about the Node (they go to "default", as Node events do).
		ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "etcd-agent-rbac-test." + fmt.Sprint(time.Now().UnixNano()), Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node), APIVersion: "v1"},
			Reason:         "RBACTest", Message: "rbac test", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "etcd-agent"},
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1}
		createdEv, err := kc.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
		allowed("create Event", err)
		if err == nil {
			_, err = kc.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, createdEv.Name, types.StrategicMergePatchType,
				[]byte(`{"count":2}`), metav1.PatchOptions{})
			allowed("patch Event", err)
		}
	})

	t.Run("denied", func(t *testing.T) {
		for _, ns := range []string{metav1.NamespaceDefault, "kube-system"} {
			_, err := kc.CoordinationV1().Leases(ns).Create(ctx, newLease("rbac-test"), metav1.CreateOptions{})
			denied("create Lease in "+ns, err)
			_, err = kc.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
			denied("list Leases in "+ns, err)
		}
		denied("delete Lease in etcd-agent", leases.Delete(ctx, "rbac-test", metav1.DeleteOptions{}))
		// resourcelock.LeaseLock gets, creates and updates; nothing lists,
		// watches or patches the Lease (TestRBACGrantsOnlyWhatCodeUses).
		_, err := leases.Patch(ctx, "rbac-test", types.MergePatchType, []byte(`{"metadata":{"annotations":{"etcd-agent.io/phase":"started"}}}`), metav1.PatchOptions{})
		denied("patch Lease", err)
		_, err = leases.List(ctx, metav1.ListOptions{})
		denied("list Leases", err)
		_, err = leases.Watch(ctx, metav1.ListOptions{})
		denied("watch Leases", err)
		denied("delete Node", kc.CoreV1().Nodes().Delete(ctx, "rbac-test-absent", metav1.DeleteOptions{}))
		_, err = kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "rbac-test-node"}}, metav1.CreateOptions{})
		denied("create Node", err)
		n, err := akc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		denied("update Node (the agent only patches)", err)
		_, err = kc.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		denied("update Node status", err)
		denied("delete Events", kc.CoreV1().Events(metav1.NamespaceDefault).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
		_, err = kc.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		denied("list Events", err)
		_, err = kc.CoreV1().Secrets(agentNamespace).List(ctx, metav1.ListOptions{})
		denied("list Secrets in etcd-agent", err)
		_, err = kc.CoreV1().Pods(agentNamespace).List(ctx, metav1.ListOptions{})
		denied("list Pods", err)
		_, err = kc.CoreV1().ConfigMaps("kube-system").Get(ctx, "kubeadm-config", metav1.GetOptions{})
		denied("get a ConfigMap", err)
		_, err = kc.RbacV1().ClusterRoles().Get(ctx, "etcd-agent", metav1.GetOptions{})
		denied("read RBAC", err)
		_, err = kc.AppsV1().DaemonSets(agentNamespace).Get(ctx, "etcd-agent", metav1.GetOptions{})
		denied("get its DaemonSet", err)
	})

	// The agent's own code paths, as the agent's identity: the recovery Lease
	// (internal/lease) and the Node reporter (internal/nodereport).
	t.Run("agent code paths", func(t *testing.T) {
		lname := lease.Name(0xc0ffee)
		le, err := lease.New(lease.Config{Client: kc, Namespace: agentNamespace, Name: lname, Holder: node + "/" + node, TTL: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := le.TryAcquire(ctx, lease.Info{Target: node, Phase: "started"}); err != nil {
			t.Fatalf("TryAcquire as the agent: %v", err)
		}
		if err := le.SetPhase(ctx, "stopped"); err != nil {
			t.Errorf("SetPhase as the agent: %v", err)
		}
		if err := le.Confirm(ctx); err != nil {
			t.Errorf("Confirm as the agent: %v", err)
		}
		if err := le.Release(ctx); err != nil {
			t.Errorf("Release as the agent: %v", err)
		}

		rep := nodereport.NewReporter(kc, node, "etcd-agent", nil)
		now := time.Now().UTC()
		if err := rep.SetLastRecovery(ctx, nodereport.LastRecovery{Request: "rejoin", Result: "refused", Reason: "dry-run",
			StartedAt: now, FinishedAt: now, Message: "rbac test"}); err != nil {
			t.Errorf("SetLastRecovery as the agent: %v", err)
		}
		rep.Eventf(corev1.EventTypeNormal, nodereport.ReasonRecoveryRefused, "rbac test %d", now.UnixNano())
		rep.Shutdown()
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			evs, err := akc.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + node + ",reason=" + nodereport.ReasonRecoveryRefused})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if strings.Contains(e.Message, fmt.Sprint(now.UnixNano())) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("the agent's Event on the Node was not recorded: %v", err)
		}
		n, err := akc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if lr, ok, err := nodereport.LastRecoveryFrom(n.Annotations); !ok || err != nil || lr.Message != "rbac test" {
			t.Errorf("last-recovery annotation not written: %v %v %+v", ok, err, lr)
		}
	})
}
