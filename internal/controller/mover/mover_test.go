package mover

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/memberstate/memberstatetest"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The mover runs in the observation loop: without a move-to on the Node
// (as the agent's watch says) it asks the API nothing, and after an API
// that did not answer it waits before it asks again, so that a hung API
// server never holds the loop up at every poll (which would also restart
// every grace period: the samples would come too far apart).
func TestTheMoverAsksTheAPINothingWithoutAMoveAndBacksOffAfterAnError(t *testing.T) {
	kc := fake.NewClientset()
	calls := 0
	kc.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		return true, nil, errors.New("the API server does not answer")
	})
	requested := false
	mv := &Mover{kc: kc, node: "node1", stateDir: t.TempDir(), log: zap.NewNop(), requested: func() bool { return requested }}
	for range 3 {
		if mv.Consider(context.Background(), memberstate.Result{}, nil) {
			t.Fatal("retired without a move")
		}
	}
	if calls != 0 {
		t.Fatalf("%d API calls without a move requested, want 0", calls)
	}
	requested = true
	for range 3 {
		mv.Consider(context.Background(), memberstate.Result{}, nil)
	}
	if calls != 1 {
		t.Fatalf("%d API calls in three looks with the API failing, want 1 (then a back-off of %s)", calls, moveBackoff)
	}
}

func readyNode(name string, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

// Review item (issue 15): the ask's PATCH reached the API but its answer
// was lost (a timeout after the write). The mover must still know the ask
// on the target as its own: not refuse its own move as "target-has-member"
// (asked by another move), but ask again, and withdraw it when it ends.
func TestAnAskWhoseAnswerWasLostIsStillTheMoversOwn(t *testing.T) {
	kc := fake.NewClientset(readyNode("node1", map[string]string{nodereport.AnnotationMoveTo: "node4"}), readyNode("node4", nil))
	lost := true
	kc.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() != "node4" || !lost {
			return false, nil, nil
		}
		lost = false
		_, obj, err := k8stesting.ObjectReaction(kc.Tracker())(a)
		if err != nil {
			return true, obj, err
		}
		return true, nil, errors.New("context deadline exceeded (the write was applied)")
	})
	dir := t.TempDir()
	mv := &Mover{kc: kc, node: "node1", stateDir: t.TempDir(), store: "file://" + dir, timeout: time.Hour, log: zap.NewNop(),
		rep: nodereport.NewReporter(kc, "node1", "test", zap.NewNop())}
	defer mv.rep.Shutdown()
	ctx := context.Background()
	mv.Consider(ctx, memberstatetest.Healthy3(), nil) // asks; the answer is lost
	n4, _ := kc.CoreV1().Nodes().Get(ctx, "node4", metav1.GetOptions{})
	if n4.Annotations[nodereport.AnnotationRecover] != nodereport.ActionMoveIn {
		t.Fatalf("the ask did not reach node4: %v", n4.Annotations)
	}
	first := n4.Annotations[nodereport.AnnotationMoveFrom]
	mv.Consider(ctx, memberstatetest.Healthy3(), nil) // the next look
	n1, _ := kc.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if lr, ok, _ := nodereport.LastRecoveryFrom(n1.Annotations); ok {
		t.Fatalf("the mover answered its own move: %+v", lr)
	}
	st := mv.loadState()
	n4, _ = kc.CoreV1().Nodes().Get(ctx, "node4", metav1.GetOptions{})
	if st.From == "" || st.AskedAt.IsZero() || n4.Annotations[nodereport.AnnotationMoveFrom] != st.From {
		t.Fatalf("state %+v, node4 asked with %q: want the ask on node4 to be the one recorded", st, n4.Annotations[nodereport.AnnotationMoveFrom])
	}
	// The ask found on node4 is adopted, not asked anew: node4's agent may
	// have begun on it, and its answer will name that ask.
	if st.From != first {
		t.Fatalf("asked anew (%q) over its own ask %q: node4's answer to the first would not count", st.From, first)
	}
	// The members at the ask are kept with it: the answer must name a
	// member new since (plan.MoveInput.MembersAtAsk).
	if len(st.Members) != len(memberstatetest.Healthy3().Observation.Members) {
		t.Fatalf("the ask's members recorded: %+v, want the %d of the observation", st.Members, len(memberstatetest.Healthy3().Observation.Members))
	}
	// The move withdrawn: the ask goes from node4.
	if _, err := kc.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, []byte(`{"metadata":{"annotations":{"etcd-agent.io/move-to":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	n4, _ = kc.CoreV1().Nodes().Get(ctx, "node4", metav1.GetOptions{})
	if _, ok := n4.Annotations[nodereport.AnnotationMoveFrom]; ok {
		t.Fatalf("the withdrawn move's ask is still on node4: %v", n4.Annotations)
	}
}

// A move-in goes on only while the source's Node asks for this node.
func TestMoveSourceGoneReadsTheSourcesMoveTo(t *testing.T) {
	kc := fake.NewClientset(readyNode("node2", map[string]string{nodereport.AnnotationMoveTo: "node4"}), readyNode("node3", nil))
	gone := SourceGone(kc, "node4")
	ctx := context.Background()
	for from, want := range map[string]string{
		nodereport.MoveFrom("node2", 0xa2, time.Now()): "",
		nodereport.MoveFrom("node3", 0xa3, time.Now()): "no longer asks",
		nodereport.MoveFrom("node9", 0xa9, time.Now()): "is gone",
		"garbage": "move-from",
	} {
		got, err := gone(ctx, from)
		if err != nil || (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: %q %v, want %q", from, got, err, want)
		}
	}
	kc.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server does not answer")
	})
	if _, err := gone(ctx, nodereport.MoveFrom("node2", 0xa2, time.Now())); err == nil {
		t.Error("an unanswered read was taken for an answer")
	}
}

// Review item (issue 41): a request already on the target (a person's
// rejoin, say) is not the mover's to overwrite: the move is refused, the
// target's request stays (the node-scope policy denies the ask too).
func TestTheMoverNeverAsksOverAnotherRequestOnTheTarget(t *testing.T) {
	kc := fake.NewClientset(readyNode("node1", map[string]string{nodereport.AnnotationMoveTo: "node4"}),
		readyNode("node4", map[string]string{nodereport.AnnotationRecover: nodereport.ActionRejoin}))
	mv := &Mover{kc: kc, node: "node1", stateDir: t.TempDir(), store: "file://" + t.TempDir(), timeout: time.Hour, log: zap.NewNop(),
		rep: nodereport.NewReporter(kc, "node1", "test", zap.NewNop())}
	defer mv.rep.Shutdown()
	ctx := context.Background()
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	n4, _ := kc.CoreV1().Nodes().Get(ctx, "node4", metav1.GetOptions{})
	if n4.Annotations[nodereport.AnnotationRecover] != nodereport.ActionRejoin {
		t.Fatalf("node4's request overwritten: %v", n4.Annotations)
	}
	n1, _ := kc.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	lr, ok, _ := nodereport.LastRecoveryFrom(n1.Annotations)
	if !ok || lr.Result != nodereport.ResultRefused || !strings.Contains(lr.Message, "recover=rejoin") {
		t.Fatalf("node1's answer: %+v (found %v), want the move refused naming node4's request", lr, ok)
	}
}

// An ask the API denies (the node-scope policy, RBAC) is not asked again at
// every look with no end: the move ends, said on this Node. A move-in on
// the target without a move-from is another request too.
func TestADeniedAskEndsTheMove(t *testing.T) {
	kc := fake.NewClientset(readyNode("node1", map[string]string{nodereport.AnnotationMoveTo: "node4"}), readyNode("node4", nil))
	patches := 0
	denyNode1 := false
	kc.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.PatchAction).GetName()
		if name == "node4" {
			patches++
		} else if !denyNode1 {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), name, errors.New("denied by the node-scope policy"))
	})
	mv := &Mover{kc: kc, node: "node1", stateDir: t.TempDir(), store: "file://" + t.TempDir(), timeout: time.Hour, log: zap.NewNop(),
		rep: nodereport.NewReporter(kc, "node1", "test", zap.NewNop())}
	defer mv.rep.Shutdown()
	ctx := context.Background()
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	n1, _ := kc.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	lr, ok, _ := nodereport.LastRecoveryFrom(n1.Annotations)
	if patches != 1 || !ok || lr.Result != nodereport.ResultFailed || !strings.Contains(lr.Message, "denied") {
		t.Fatalf("asks %d, answer %+v (found %v): want one ask, the move failed naming the denial", patches, lr, ok)
	}
	if _, still := n1.Annotations[nodereport.AnnotationMoveTo]; still {
		t.Fatalf("the move request stays after its end: %v", n1.Annotations)
	}
	// Its own Node's writes denied too (tokens without a node): the
	// request stays, and still it is not asked again at every look.
	denyNode1 = true
	n1.Annotations[nodereport.AnnotationMoveTo] = "node4" // asked again (an update: the patches are denied)
	if _, err := kc.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	}
	if patches != 2 {
		t.Fatalf("asks %d after a second denied move with its answer denied too: want the one ask, never again while move-to names the same node", patches)
	}

	kc = fake.NewClientset(readyNode("node1", map[string]string{nodereport.AnnotationMoveTo: "node4"}),
		readyNode("node4", map[string]string{nodereport.AnnotationRecover: nodereport.ActionMoveIn}))
	mv.kc, mv.rep = kc, nodereport.NewReporter(kc, "node1", "test", zap.NewNop())
	defer mv.rep.Shutdown()
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	n4, _ := kc.CoreV1().Nodes().Get(ctx, "node4", metav1.GetOptions{})
	if _, asked := n4.Annotations[nodereport.AnnotationMoveFrom]; asked {
		t.Fatalf("asked over a move-in without a move-from: %v", n4.Annotations)
	}
}

// An ask the API refused with a client error (a conflict) was not applied:
// it is asked again at the next look; one that got no answer is not.
func TestAnAskTheAPIRefusedIsAskedAgain(t *testing.T) {
	kc := fake.NewClientset(readyNode("node1", map[string]string{nodereport.AnnotationMoveTo: "node4"}), readyNode("node4", nil))
	asks := 0
	kc.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() != "node4" {
			return false, nil, nil
		}
		if asks++; asks == 1 {
			return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "node4", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	mv := &Mover{kc: kc, node: "node1", stateDir: t.TempDir(), store: "file://" + t.TempDir(), timeout: time.Hour, log: zap.NewNop(),
		rep: nodereport.NewReporter(kc, "node1", "test", zap.NewNop())}
	defer mv.rep.Shutdown()
	ctx := context.Background()
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	if st := mv.loadState(); st.From != "" || !st.AskedAt.IsZero() {
		t.Fatalf("state after a refused ask: %+v, want no ask recorded", st)
	}
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	n4, _ := kc.CoreV1().Nodes().Get(ctx, "node4", metav1.GetOptions{})
	if st := mv.loadState(); asks != 2 || st.From == "" || n4.Annotations[nodereport.AnnotationMoveFrom] != st.From {
		t.Fatalf("asks %d, state %+v, node4 %v: want the ask made again and recorded", asks, st, n4.Annotations)
	}
}

// A denial is forgotten once move-to is gone, even when the agent's watch
// says so (requested false): the same move asked again later is asked.
func TestADeniedMoveIsAskedAgainOnceRequestedAnew(t *testing.T) {
	kc := fake.NewClientset(readyNode("node1", nil), readyNode("node4", nil))
	requested := false
	mv := &Mover{kc: kc, node: "node1", stateDir: t.TempDir(), store: "file://" + t.TempDir(), timeout: time.Hour, log: zap.NewNop(),
		rep: nodereport.NewReporter(kc, "node1", "test", zap.NewNop()), requested: func() bool { return requested }}
	defer mv.rep.Shutdown()
	mv.saveState(moveState{Denied: "node4"}) // an earlier move to node4 was denied; move-to since cleared
	ctx := context.Background()
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	n1, _ := kc.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	n1.Annotations = map[string]string{nodereport.AnnotationMoveTo: "node4"}
	if _, err := kc.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	requested = true
	mv.Consider(ctx, memberstatetest.Healthy3(), nil)
	n4, _ := kc.CoreV1().Nodes().Get(ctx, "node4", metav1.GetOptions{})
	if n4.Annotations[nodereport.AnnotationRecover] != nodereport.ActionMoveIn {
		t.Fatalf("the move asked anew after the denial was not asked: node4 %v, state %+v", n4.Annotations, mv.loadState())
	}
}
