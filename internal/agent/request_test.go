package agent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
)

// A request the watch queued is acted on as the annotations say it now,
// never as the queued copy: found by CI (TestMoveStatefulSetMemberToAChosenNode/
// file-etcd3.7): a dry run to node4, answered; a second pod update had queued
// it again; the real request to node1 that followed was then answered with
// node4's dry-run plan, and its trigger cleared unanswered.
func TestAQueuedRequestIsTakenAsTheAnnotationsSayItNow(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etcd-1", Annotations: map[string]string{
		nodereport.AnnotationMoveTo: "node1"}}}
	kc := fake.NewClientset(pod)
	queued := make(chan request, 1)
	queued <- request{req: nodereport.Request{Action: nodereport.ActionMoveAway, Target: "node4", DryRun: true}}
	got, ok := nextRequest(context.Background(), queued, func(ctx context.Context) (request, bool) {
		return podRequestNow(ctx, kc, "ns", "etcd-1")
	})
	if !ok || got.req.Target != "node1" || got.req.DryRun {
		t.Fatalf("took %+v (%v), want the move to node1 the pod asks for now, not a dry run", got.req, ok)
	}

	// Answered meanwhile (the trigger cleared): nothing to take.
	queued <- request{req: nodereport.Request{Action: nodereport.ActionMoveAway, Target: "node4"}}
	if _, ok := nextRequest(context.Background(), queued, func(context.Context) (request, bool) { return request{}, false }); ok {
		t.Fatal("a request whose trigger is gone was taken")
	}
	if _, ok := nextRequest(context.Background(), queued, func(context.Context) (request, bool) { t.Fatal("re-read with nothing queued"); return request{}, true }); ok {
		t.Fatal("a request taken with nothing queued")
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp-1", Annotations: map[string]string{nodereport.AnnotationRecover: "rejoin"}}}
	if r, ok := nodeRequestNow(context.Background(), fake.NewClientset(node), "cp-1"); !ok || r.req.Action != "rejoin" || r.req.DryRun {
		t.Fatalf("the Node's request now: %+v (%v), want rejoin", r.req, ok)
	}
}
