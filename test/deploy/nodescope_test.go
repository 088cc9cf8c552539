package deploy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// nodeNameExtra is where the API server puts the node of the pod a
// ServiceAccount token is bound to.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// policyDenial: the request was refused by the node-scope policy (not by
// RBAC, which allows all of these).
func policyDenial(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) && strings.Contains(err.Error(), "etcd-agent-node-scope")
}

// TestAgentActsOnlyForItsOwnNode applies the shipped RBAC and node-scope
// policy to the lab's real kube-apiserver and acts with real ServiceAccount
// tokens, each bound to an agent pod on a node (TokenRequest, as the kubelet
// asks for the pod's projected token): the API server itself says which
// node a request comes from. The agent on node A may write its own Node's
// etcd-agent.io annotations and ask B for a move of its member; it may not
// touch anything else of B, nor its own Node's other fields.
func TestAgentActsOnlyForItsOwnNode(t *testing.T) {
	l, admin, akc := rbacLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodeA := l.Spec.Nodes[0].Name
	nodeB := "node-scope-test-b"
	if _, err := akc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeB}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = akc.CoreV1().Nodes().Delete(context.Background(), nodeB, metav1.DeleteOptions{}) })

	agentA := agentClient(t, ctx, akc, admin, nodeA)
	agentB := agentClient(t, ctx, akc, admin, nodeB)
	patchNode := func(kc kubernetes.Interface, node, patch string) error {
		_, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	ann := func(kv string) string { return `{"metadata":{"annotations":{` + kv + `}}}` }

	// The policy is in force once the API server has compiled it: until a
	// write it must deny is denied (bounded).
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return policyDenial(patchNode(agentA, nodeB, ann(`"etcd-agent.io/recover":"rejoin"`))), nil
	})
	if err != nil {
		t.Fatalf("the agent on %s may still request a rejoin on %s: the node-scope policy is not in force: %v", nodeA, nodeB, err)
	}
	// Writes let through before the policy was in force are undone.
	if err := patchNode(akc, nodeB, ann(`"etcd-agent.io/recover":null`)); err != nil {
		t.Fatal(err)
	}

	allowed, denied := verdicts(t, "by the node-scope policy", func(err error) bool {
		return policyDenial(err) && strings.Contains(err.Error(), "'etcd-agent-node-scope'")
	})

	t.Run("own node", func(t *testing.T) {
		allowed("status on its own Node", patchNode(agentA, nodeA, ann(`"etcd-agent.io/status":"{\"state\":\"healthy\"}"`)))
		allowed("clear a request it answered", patchNode(agentA, nodeA, ann(`"etcd-agent.io/recover":null`)))
		rep := nodereport.NewReporter(agentA, nodeA, "etcd-agent", nil)
		now := time.Now().UTC()
		allowed("last-recovery through the reporter", rep.SetLastRecovery(ctx, nodereport.LastRecovery{Request: "rejoin", Result: "refused",
			Reason: "dry-run", StartedAt: now, FinishedAt: now, Message: "node scope test"}))
		rep.Shutdown()
		allowed("clear the other requests it answered", patchNode(agentA, nodeA,
			ann(`"etcd-agent.io/move-to":null,"etcd-agent.io/decommission":null,"etcd-agent.io/recover-dry-run":null,"etcd-agent.io/move-from":null`)))
		// A request is a person's (or, a move-in, the source agent's): the
		// agent answers and clears it on its own Node, never sets one there.
		denied("request a rejoin on its own Node", patchNode(agentA, nodeA, ann(`"etcd-agent.io/recover":"rejoin"`)))
		denied("ask its own Node's member to move", patchNode(agentA, nodeA, ann(`"etcd-agent.io/move-to":"`+nodeB+`"`)))
		denied("decommission its own Node's member", patchNode(agentA, nodeA, ann(`"etcd-agent.io/decommission":"true"`)))
		denied("a dry-run flag on its own Node", patchNode(agentA, nodeA, ann(`"etcd-agent.io/recover-dry-run":"true"`)))
		denied("a move-in ask on its own Node", patchNode(agentA, nodeA,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask"`)))
		denied("a label on its own Node", patchNode(agentA, nodeA, `{"metadata":{"labels":{"node-scope-test":"x"}}}`))
		denied("another owner's annotation on its own Node", patchNode(agentA, nodeA, ann(`"node.alpha.kubernetes.io/ttl":"5"`)))
		denied("a taint on its own Node", patchNode(agentA, nodeA, `{"spec":{"taints":[{"key":"node-scope-test","effect":"NoSchedule"}]}}`))
		denied("cordon its own Node", patchNode(agentA, nodeA, `{"spec":{"unschedulable":true}}`))
	})

	t.Run("another node", func(t *testing.T) {
		denied("request a rejoin on B", patchNode(agentA, nodeB, ann(`"etcd-agent.io/recover":"rejoin"`)))
		denied("request a replace on B", patchNode(agentA, nodeB, ann(`"etcd-agent.io/recover":"replace"`)))
		denied("write B's status", patchNode(agentA, nodeB, ann(`"etcd-agent.io/status":"{}"`)))
		denied("write B's pins", patchNode(agentA, nodeB, ann(`"etcd-agent.io/pins":"{}"`)))
		denied("ask B to move B's member away", patchNode(agentA, nodeB, ann(`"etcd-agent.io/move-to":"`+nodeA+`"`)))
		denied("a move ask naming another source", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeB+`/1a2b/ask"`)))
		denied("a move ask with more in it", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask","etcd-agent.io/decommission":"true"`)))
		// The move's ask as internal/agent's mover writes it (ask, withdraw).
		allowed("ask B for a move of its own member", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask","etcd-agent.io/recover-dry-run":null`)))
		allowed("withdraw its own ask", patchNode(agentA, nodeB, ann(`"etcd-agent.io/recover":null,"etcd-agent.io/move-from":null`)))
		// Another source's ask on B (written here by the admin) is not A's to withdraw.
		allowed("a person's move ask on B", patchNode(akc, nodeB, ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"node-c/1a2b/ask"`)))
		denied("withdraw another source's ask", patchNode(agentA, nodeB, ann(`"etcd-agent.io/recover":null,"etcd-agent.io/move-from":null`)))
		allowed("B's agent answers its own Node's ask", patchNode(agentB, nodeB, ann(`"etcd-agent.io/recover":null,"etcd-agent.io/move-from":null`)))
		allowed("B's agent answers on its own Node", patchNode(agentB, nodeB, ann(`"etcd-agent.io/last-recovery":"{}"`)))
		// An ask never sets the dry-run flag (it clears it), and never
		// replaces a request already on B: a person's, or another source's.
		denied("a move ask that sets the dry-run flag", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask","etcd-agent.io/recover-dry-run":"true"`)))
		allowed("a person's rejoin request on B", patchNode(akc, nodeB, ann(`"etcd-agent.io/recover":"rejoin"`)))
		denied("a move ask over a person's request on B", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask"`)))
		allowed("another source's ask on B", patchNode(akc, nodeB, ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"node-c/1a2b/ask"`)))
		denied("a move ask over another source's ask on B", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask"`)))
		allowed("B's agent clears it", patchNode(agentB, nodeB, ann(`"etcd-agent.io/recover":null,"etcd-agent.io/move-from":null`)))
		allowed("an ask on B again", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask2","etcd-agent.io/recover-dry-run":null`)))
		allowed("asked again over its own ask (a retry after a lost answer)", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask3","etcd-agent.io/recover-dry-run":null`)))
		// A person's request set over A's pending ask (move-from left
		// behind) is not A's to overwrite or withdraw.
		allowed("a person's rejoin over A's ask", patchNode(akc, nodeB, ann(`"etcd-agent.io/recover":"rejoin"`)))
		denied("A's ask again over it", patchNode(agentA, nodeB,
			ann(`"etcd-agent.io/recover":"move-in","etcd-agent.io/move-from":"`+nodeA+`/1a2b/ask4","etcd-agent.io/recover-dry-run":null`)))
		denied("A withdraws the person's request", patchNode(agentA, nodeB, ann(`"etcd-agent.io/recover":null,"etcd-agent.io/move-from":null`)))
		allowed("the person's request goes back to A's ask", patchNode(akc, nodeB, ann(`"etcd-agent.io/recover":"move-in"`)))
		// A person's dry-run flag since does not keep A from withdrawing.
		allowed("a person's dry-run flag on B", patchNode(akc, nodeB, ann(`"etcd-agent.io/recover-dry-run":"true"`)))
		allowed("withdraw it", patchNode(agentA, nodeB, ann(`"etcd-agent.io/recover":null,"etcd-agent.io/move-from":null`)))
	})

	t.Run("not the agent's pod", func(t *testing.T) {
		// The same ServiceAccount without a node: a token not bound to a pod.
		kc := unboundAgent(t, admin)
		denied("its own Node's status without a node in the token", patchNode(kc, nodeA, ann(`"etcd-agent.io/status":"{}"`)))
		// A person (the lab's admin) is not matched: requests stay theirs.
		allowed("a person requests a rejoin on B", patchNode(akc, nodeB, ann(`"etcd-agent.io/recover":"rejoin"`)))
		allowed("a person sets a label", patchNode(akc, nodeB, `{"metadata":{"labels":{"node-scope-test":"x"}}}`))
	})
}

// agentClient is a client with a real token of the agent's ServiceAccount
// bound to an agent pod on node (the pod is created, never run).
func agentClient(t *testing.T, ctx context.Context, akc kubernetes.Interface, admin *rest.Config, node string) kubernetes.Interface {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-agent-scope-" + node, Namespace: agentNamespace},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "etcd-agent", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Image: "etcd-agent.invalid/none"}}}}
	p, err := akc.CoreV1().Pods(agentNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		p, err = akc.CoreV1().Pods(agentNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = akc.CoreV1().Pods(agentNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	tr, err := akc.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, "etcd-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The token says the node: the API server's own view of who asks.
	rev, err := kc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := rev.Status.UserInfo.Extra[nodeNameExtra]; len(got) != 1 || got[0] != node || rev.Status.UserInfo.Username != agentIdentity {
		t.Fatalf("the token bound to a pod on %s authenticates as %s with %s=%v", node, rev.Status.UserInfo.Username, nodeNameExtra, got)
	}
	return kc
}

// TestAgentHoldsTheRecoveryLeaseOnlyInItsOwnName: the Lease is one per
// cluster, shared by every node's agent (RBAC cannot scope it to a node).
// The lease-scope policy lets an agent's token set the holder only to its
// own node's name and free only its own hold: a leaked token cannot hold
// in another agent's name, nor free another agent's hold mid-change. (It
// can still take an expired or live hold in its own name: the holder's
// fence then stops it before its next step, docs/security.md.)
func TestAgentHoldsTheRecoveryLeaseOnlyInItsOwnName(t *testing.T) {
	l, admin, akc := rbacLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodeA, nodeB := l.Spec.Nodes[0].Name, "lease-scope-test-b"
	agentA := agentClient(t, ctx, akc, admin, nodeA)
	agentB := agentClient(t, ctx, akc, admin, nodeB)
	const ns = "etcd-agent"
	leaseFor := func(name, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: ptr.To[int32](30)}}
	}
	create := func(kc kubernetes.Interface, name, holder string) error {
		_, err := kc.CoordinationV1().Leases(ns).Create(ctx, leaseFor(name, holder), metav1.CreateOptions{})
		return err
	}
	setHolder := func(kc kubernetes.Interface, name, holder string) error {
		le, err := kc.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		le.Spec.HolderIdentity = &holder
		_, err = kc.CoordinationV1().Leases(ns).Update(ctx, le, metav1.UpdateOptions{})
		return err
	}
	leaseDenial := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "'etcd-agent-lease-scope'")
	}
	// In force once compiled: until a hold in another's name is denied.
	i := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		i++
		return leaseDenial(create(agentA, fmt.Sprintf("lease-scope-probe-%d", i), nodeB+"/m1")), nil
	})
	if err != nil {
		t.Fatalf("the agent on %s may still create a Lease held by %s: the lease-scope policy is not in force: %v", nodeA, nodeB, err)
	}
	allowed, denied := verdicts(t, "by the lease-scope policy", leaseDenial)
	name := "etcd-agent-lease-scope-test"
	// As internal/lease writes it: holder "<node>/<member>[/steward]".
	allowed("A holds the Lease", create(agentA, name, nodeA+"/m1"))
	allowed("A renews its hold", setHolder(agentA, name, nodeA+"/m1"))
	denied("B holds in A's name", setHolder(agentB, name, nodeA+"/m2"))
	denied("B frees A's hold", setHolder(agentB, name, ""))
	allowed("B takes the hold in its own name (an expired one, say)", setHolder(agentB, name, nodeB+"/m2/steward"))
	denied("A frees B's hold", setHolder(agentA, name, ""))
	allowed("B frees its own hold", setHolder(agentB, name, ""))
	denied("a hold in a name that only begins like A's", setHolder(agentA, name, nodeA+"x/m1"))
	allowed("a person's write is not matched", setHolder(akc, name, "someone"))
}

// verdicts are a test's checks of a write: allowed (no error), denied
// (isDenied says it was, by what).
func verdicts(t *testing.T, by string, isDenied func(error) bool) (allowed, denied func(what string, err error)) {
	allowed = func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: want allowed, got %v", what, err)
		}
	}
	denied = func(what string, err error) {
		t.Helper()
		if !isDenied(err) {
			t.Errorf("%s: want denied %s, got %v", what, by, err)
		}
	}
	return allowed, denied
}
