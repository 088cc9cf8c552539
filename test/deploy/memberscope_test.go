package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// TestManagementAgentActsOnlyForItsOwnNodesMembers applies the management
// overlay's RBAC and its member and PV scope policies to the lab's real
// kube-apiserver and acts with real tokens bound to agent pods on two nodes:
// the agent on A writes its own node's member pods (status, answers, a stop)
// and, of another node's, only what the steward does for a lost node (mark
// and delete a pod that is not Ready); of PVs only Retain and a move's
// reservation of a free one. The overlay's objects are removed at the end:
// the other tests here judge the base's RBAC alone.
func TestManagementAgentActsOnlyForItsOwnNodesMembers(t *testing.T) {
	l, admin, akc := rbacLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	applyManagementOverlayOnly(t, ctx, newApplier(t, admin))
	nodeA := l.Spec.Nodes[0].Name
	nodeB := testNode(t, ctx, akc, "member-scope-test-b", corev1.ConditionTrue)
	// Lost: the node-lifecycle controller says Unknown.
	nodeLost := testNode(t, ctx, akc, "member-scope-test-lost", corev1.ConditionUnknown)
	const ns = "member-scope-test"
	if _, err := akc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// No controller manager runs here to create it.
	if _, err := akc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// As deploy/overlays/management tells: the writer bound in each hosted namespace.
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "etcd-agent-members", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "etcd-agent-member-writer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "etcd-agent", Namespace: agentNamespace}}}
	if _, err := akc.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	agentA := agentClient(t, ctx, akc, admin, nodeA)

	podA := memberPod(t, ctx, akc, ns, "etcd-a", nodeA, true)
	podU := memberPod(t, ctx, akc, ns, "etcd-unscheduled", "", false)
	podB := memberPod(t, ctx, akc, ns, "etcd-b", nodeB, false) // not Ready, on a Ready node
	// Still Ready on a lost node: the node-lifecycle controller does not
	// mark pods when a NotReady node goes Unknown (kubernetes#112733).
	podLost := memberPod(t, ctx, akc, ns, "etcd-lost", nodeLost, true)
	// Pods in the same namespace that are no etcd members (no app=etcd,
	// the DaemonSet's ETCD_AGENT_POD_SELECTOR).
	otherA := namespacePod(t, ctx, akc, ns, "other-a", nodeA, map[string]string{"app": "backup"}, true)
	otherLost := namespacePod(t, ctx, akc, ns, "other-lost", nodeLost, nil, true)
	patchPod := func(kc kubernetes.Interface, name, patch string) error {
		_, err := kc.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	deletePod := func(kc kubernetes.Interface, name string, grace int64) error {
		return kc.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	ann := func(kv string) string { return `{"metadata":{"annotations":{` + kv + `}}}` }
	scopeDenial := func(policy string) func(error) bool {
		return func(err error) bool {
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "'"+policy+"'")
		}
	}
	// In force once compiled: until a write it must deny is denied.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return scopeDenial("etcd-agent-member-scope")(patchPod(agentA, podB, ann(`"etcd-agent.io/status":"{}"`))), nil
	})
	if err != nil {
		t.Fatalf("the agent on %s may still annotate a pod on Ready node %s: the member-scope policy is not in force: %v", nodeA, nodeB, err)
	}

	t.Run("pods", func(t *testing.T) {
		allowed, denied := verdicts(t, "by the member-scope policy", scopeDenial("etcd-agent-member-scope"))
		// Its own node's member, as internal/nodereport writes it.
		allowed("status on its own node's member pod", patchPod(agentA, podA, ann(`"etcd-agent.io/status":"{\"state\":\"healthy\"}"`)))
		allowed("status on a pod bound to no node yet", patchPod(agentA, podU, ann(`"etcd-agent.io/status":"{}"`)))
		if err := patchPod(akc, podA, ann(`"etcd-agent.io/recover":"rejoin","etcd-agent.io/move-to":"`+nodeB+`"`)); err != nil {
			t.Fatal(err)
		}
		allowed("clear the requests it answered", patchPod(agentA, podA, ann(`"etcd-agent.io/recover":null,"etcd-agent.io/move-to":null`)))
		denied("request a rejoin of its own member", patchPod(agentA, podA, ann(`"etcd-agent.io/recover":"replace"`)))
		denied("move its own member", patchPod(agentA, podA, ann(`"etcd-agent.io/move-to":"`+nodeB+`"`)))
		denied("another owner's annotation", patchPod(agentA, podA, ann(`"example.com/x":"y"`)))
		denied("a label", patchPod(agentA, podA, `{"metadata":{"labels":{"member-scope-test":"x"}}}`))
		denied("the pod's spec", patchPod(agentA, podA, `{"spec":{"activeDeadlineSeconds":5}}`))
		// A member of another node that is Ready (the pod itself not Ready:
		// down or starting): nothing.
		denied("status on a pod of another node", patchPod(agentA, podB, ann(`"etcd-agent.io/status":"{}"`)))
		denied("the steward's mark on a pod of a Ready node", patchPod(agentA, podB, ann(`"etcd-agent.io/removed-member":"1/2"`)))
		denied("a request on another node's pod", patchPod(agentA, podB, ann(`"etcd-agent.io/recover":"rejoin"`)))
		denied("delete a pod of a Ready node", deletePod(agentA, podB, 0))
		// A lost node's member: what the steward does.
		denied("status on a lost node's pod", patchPod(agentA, podLost, ann(`"etcd-agent.io/status":"{}"`)))
		denied("the mark with more in it", patchPod(agentA, podLost, ann(`"etcd-agent.io/removed-member":"1/2","etcd-agent.io/recover":"rejoin"`)))
		denied("a label on a lost node's pod", patchPod(agentA, podLost, `{"metadata":{"labels":{"member-scope-test":"x"}}}`))
		mark := `{"metadata":{"uid":"` + string(podUID(t, ctx, akc, ns, podLost)) + `","annotations":{"etcd-agent.io/removed-member":"1/2"}}}`
		allowed("the steward's mark on a lost node's pod", patchPod(agentA, podLost, mark))
		// A removal that failed is tried again, mark first (the same mark).
		allowed("the steward's mark again", patchPod(agentA, podLost, mark))
		allowed("the steward force-deletes a lost node's pod", deletePod(agentA, podLost, 0))
		allowed("stop its own node's member (delete its pod)", deletePod(agentA, podA, 30))
		// Pods that are not members: nothing, on any node.
		err := patchPod(agentA, otherA, ann(`"etcd-agent.io/status":"{}"`))
		denied("status on its own node's pod that is no member", err)
		if want := "acts only on etcd member pods (labels app=etcd, its --pod-selector): pod other-a is none"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the denial says %v, want it to say %q", err, want)
		}
		denied("delete its own node's pod that is no member", deletePod(agentA, otherA, 30))
		otherMark := `{"metadata":{"uid":"` + string(podUID(t, ctx, akc, ns, otherLost)) + `","annotations":{"etcd-agent.io/removed-member":"1/2"}}}`
		denied("the steward's mark on a lost node's pod that is no member", patchPod(agentA, otherLost, otherMark))
		denied("force-delete a lost node's pod that is no member", deletePod(agentA, otherLost, 0))
		// A person is not matched.
		allowed("a person annotates any pod", patchPod(akc, podB, ann(`"etcd-agent.io/recover":"rejoin"`)))
	})

	t.Run("persistent volumes", func(t *testing.T) {
		allowed, denied := verdicts(t, "by the PV scope policy", scopeDenial("etcd-agent-pv-scope"))
		free := localPV(t, ctx, akc, "member-scope-free", nodeB, corev1.PersistentVolumeReclaimDelete, nil)
		bound := localPV(t, ctx, akc, "member-scope-bound", nodeA, corev1.PersistentVolumeReclaimRetain,
			&corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: "data-etcd-a", UID: "0b6c0c2e-0000-4000-8000-000000000001"})
		patchPV := func(kc kubernetes.Interface, name, patch string) error {
			_, err := kc.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		}
		const claim = `{"kind":"PersistentVolumeClaim","apiVersion":"v1","namespace":"` + ns + `","name":"data-etcd-b"}`
		// As internal/agent's steward and pod mover write them.
		allowed("keep a PV's data (Retain)", patchPV(agentA, free, `{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`))
		denied("drop a PV's data (Delete)", patchPV(agentA, bound, `{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}`))
		denied("a move-seed without a reservation", patchPV(agentA, free, ann(`"etcd-agent.io/move-seed":"x"`)))
		denied("a reservation without its move-seed", patchPV(agentA, free, `{"spec":{"claimRef":`+claim+`}}`))
		allowed("reserve a free PV for a move", patchPV(agentA, free,
			`{"metadata":{"annotations":{"etcd-agent.io/move-seed":"x"}},"spec":{"claimRef":`+claim+`}}`))
		allowed("take the reservation back", patchPV(agentA, free, `{"metadata":{"annotations":{"etcd-agent.io/move-seed":null}},"spec":{"claimRef":null}}`))
		if err := patchPV(akc, free, `{"spec":{"claimRef":`+claim+`}}`); err != nil { // a person's pre-binding
			t.Fatal(err)
		}
		denied("take a person's pre-binding off a PV", patchPV(agentA, free, `{"spec":{"claimRef":null}}`))
		denied("take a bound claim off its PV", patchPV(agentA, bound, `{"metadata":{"annotations":{"etcd-agent.io/move-seed":null}},"spec":{"claimRef":null}}`))
		denied("reserve a PV claimed already", patchPV(agentA, bound,
			`{"metadata":{"annotations":{"etcd-agent.io/move-seed":"x"}},"spec":{"claimRef":`+claim+`}}`))
		denied("a PV's label", patchPV(agentA, free, `{"metadata":{"labels":{"member-scope-test":"x"}}}`))
		denied("a PV's capacity", patchPV(agentA, free, `{"spec":{"capacity":{"storage":"2Gi"}}}`))
		denied("another annotation of a PV", patchPV(agentA, free, ann(`"example.com/x":"y"`)))
		allowed("a person changes a PV", patchPV(akc, free, `{"metadata":{"labels":{"member-scope-test":"x"}}}`))
		denied("Retain with a token bound to no node", patchPV(unboundAgent(t, admin), bound, `{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`))
	})

	t.Run("claims", func(t *testing.T) {
		allowed, denied := verdicts(t, "by the claim scope policy", scopeDenial("etcd-agent-claim-scope"))
		kept := localPV(t, ctx, akc, "member-scope-kept", nodeB, corev1.PersistentVolumeReclaimRetain, nil)
		dropped := localPV(t, ctx, akc, "member-scope-dropped", nodeB, corev1.PersistentVolumeReclaimDelete, nil)
		// A StatefulSet's claims carry its selector's labels (app=etcd here).
		claimOn := func(name, pv string, labels map[string]string) string {
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
				Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv, StorageClassName: ptr.To("member-scope-test"),
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
			if _, err := akc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = akc.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
			})
			return name
		}
		deleteClaim := func(kc kubernetes.Interface, name string) error {
			return kc.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
		member := map[string]string{"app": "etcd"}
		onDropped, onKept, unbound := claimOn("data-dropped", dropped, member), claimOn("data-kept", kept, member), claimOn("data-unbound", "", member)
		keptOther := localPV(t, ctx, akc, "member-scope-kept-other", nodeB, corev1.PersistentVolumeReclaimRetain, nil)
		other := claimOn("backup-kept", keptOther, map[string]string{"app": "backup"})
		// The policy reads PVs as parameters: in force once it has them.
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			return scopeDenial("etcd-agent-claim-scope")(deleteClaim(agentA, onDropped)), nil
		})
		if err != nil {
			t.Fatalf("the agent may delete a claim whose PV drops its data: the claim-scope policy is not in force: %v", err)
		}
		denied("delete a claim whose PV drops its data (Delete)", deleteClaim(agentA, onDropped))
		allowed("delete a claim whose PV keeps its data (as the steward and the mover do)", deleteClaim(agentA, onKept))
		allowed("delete a claim bound to no PV", deleteClaim(agentA, unbound))
		err = deleteClaim(agentA, other)
		denied("delete a claim that is no member's, its PV kept", err)
		if want := "deletes only an etcd member's claim (labels app=etcd, which a StatefulSet puts on its claims from its selector): claim backup-kept is none"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the denial says %v, want it to say %q", err, want)
		}
		denied("delete a claim with a token bound to no node", deleteClaim(unboundAgent(t, admin), onDropped))
		allowed("a person deletes any claim", deleteClaim(akc, onDropped))
	})
}

// applyManagementOverlayOnly applies what the management overlay adds to the
// base (its RBAC and policies) and removes it when the test ends.
func applyManagementOverlayOnly(t *testing.T, ctx context.Context, a *applier) {
	t.Helper()
	base := map[string]bool{}
	for _, o := range renderVariant(t, variants[0]) {
		base[objectID(o)] = true
	}
	objs, err := render(repoPath("deploy", "overlays", "management"))
	if err != nil {
		t.Fatal(err)
	}
	var added []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if base[objectID(o)] {
				continue
			}
			if err := a.apply(ctx, o, false); err != nil {
				t.Fatalf("apply: %v", err)
			}
			added = append(added, o)
		}
	}
	t.Cleanup(func() {
		for _, o := range added {
			if err := a.delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("remove %s: %v", objectID(o), err)
			}
		}
	})
}

// memberPod creates a member pod (app=etcd) bound to node (never run: no
// kubelet here serves these) with the Ready condition the node-lifecycle
// controller or the kubelet would have written.
func memberPod(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, name, node string, ready bool) string {
	t.Helper()
	return namespacePod(t, ctx, kc, ns, name, node, map[string]string{"app": "etcd"}, ready)
}

// namespacePod is memberPod with the given labels.
func namespacePod(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, name, node string, labels map[string]string, ready bool) string {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "etcd", Image: "etcd.invalid/none"}}}}
	p, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kc.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if _, err := kc.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func podUID(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, name string) types.UID {
	t.Helper()
	p, err := kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.UID
}

// localPV creates a local PV on node (claimed by claim, or Available).
func localPV(t *testing.T, ctx context.Context, kc kubernetes.Interface, name, node string, reclaim corev1.PersistentVolumeReclaimPolicy, claim *corev1.ObjectReference) string {
	t.Helper()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: reclaim, StorageClassName: "member-scope-test", ClaimRef: claim,
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/" + name}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}}
	p, err := kc.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// The phase the PV controller gives it (none may run here).
	p.Status.Phase = corev1.VolumeAvailable
	if claim != nil {
		p.Status.Phase = corev1.VolumeBound
	}
	if _, err := kc.CoreV1().PersistentVolumes().UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// testNode creates a Node whose Ready condition is ready (the kubelet's or
// the node-lifecycle controller's word; none runs for it here).
func testNode(t *testing.T, ctx context.Context, kc kubernetes.Interface, name string, ready corev1.ConditionStatus) string {
	t.Helper()
	n, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := kc.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// unboundAgent is the agent's ServiceAccount without a node: a token not
// bound to a pod.
func unboundAgent(t *testing.T, admin *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: agentIdentity,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:etcd-agent", "system:authenticated"}}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}
