package nodereport_test

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// From issue 38 (the e2e move hung 5 minutes with the first fix): a pod
// member's reporter is its own node's. Once its pod of that name is bound
// to another node (a move re-created it there), the pod is that node's
// agent's: the move's source wrote its own "succeeded" (and first a
// "refused awaiting-move-target") over the target agent's answer, which
// `etcd-agent move` waits for. It writes no annotation there now (the
// answer stays in its log, journal and Events); a pod bound to its node, or
// to none yet, it writes as before.
func TestAPodReporterLeavesAPodBoundToAnotherNodeAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	answer := `{"request":"auto","result":"succeeded","moveFrom":"ns/etcd-1@node2","memberID":"a9"}`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-1", Namespace: "ns", Annotations: map[string]string{
		nodereport.AnnotationLastRecovery: answer, nodereport.AnnotationStatus: "healthy (node4's)", nodereport.AnnotationMoveTo: "node5"}},
		Spec: corev1.PodSpec{NodeName: "node4"}}
	kc := fake.NewClientset(pod)
	r := nodereport.NewPodReporter(kc, "ns", "etcd-1", "node2", "etcd-agent-test", zaptest.NewLogger(t))
	t.Cleanup(r.Shutdown)
	lr := nodereport.LastRecovery{Request: "move-away", Result: nodereport.ResultSucceeded, StartedAt: time.Unix(100, 0).UTC(), FinishedAt: time.Unix(130, 0).UTC()}
	if err := r.SetLastRecovery(ctx, lr); err != nil {
		t.Fatalf("SetLastRecovery on a pod of another node: %v (want it left alone, no error)", err)
	}
	if err := r.SetStatus(ctx, "lost (not-a-member): node2's view"); err != nil {
		t.Fatal(err)
	}
	if err := r.ClearRequest(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := kc.CoreV1().Pods("ns").Get(ctx, "etcd-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Annotations; a[nodereport.AnnotationLastRecovery] != answer || a[nodereport.AnnotationStatus] != "healthy (node4's)" || a[nodereport.AnnotationMoveTo] != "node5" {
		t.Fatalf("node2's reporter wrote node4's pod: annotations %v", a)
	}
	// Bound to its own node, or not bound yet (Pending): written.
	for _, node := range []string{"node2", ""} {
		got.Spec.NodeName = node
		if _, err := kc.CoreV1().Pods("ns").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := r.SetLastRecovery(ctx, lr); err != nil {
			t.Fatal(err)
		}
		after, err := kc.CoreV1().Pods("ns").Get(ctx, "etcd-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l, ok, err := nodereport.LastRecoveryFrom(after.Annotations); err != nil || !ok || l.Request != "move-away" {
			t.Fatalf("pod on %q: last-recovery %+v %v %v, want node2's written", node, l, ok, err)
		}
		got = after
		got.Annotations[nodereport.AnnotationLastRecovery] = answer
	}
}
