package nodereport_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// newPod creates a member pod of the test's own in "default" (no scheduler
// runs in this lab: it stays Pending, which is all the reporter needs).
func newPod(t *testing.T, kc kubernetes.Interface, annotations map[string]string) *corev1.Pod {
	t.Helper()
	// No controller-manager runs here to create the namespace's default
	// ServiceAccount, which admission needs.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if _, err := kc.CoreV1().ServiceAccounts("default").Create(ctxFor(t, 10*time.Second), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("etcd-%d", time.Now().UnixNano()), Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}}}
	p, err := kc.CoreV1().Pods("default").Create(ctxFor(t, 10*time.Second), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		zero := int64(0)
		_ = kc.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return p
}

func TestAPodReporterAnnotatesAndRecordsEventsOnThePod(t *testing.T) {
	kc, ctx := newClient(t), ctxFor(t, 30*time.Second)
	pod := newPod(t, kc, map[string]string{nodereport.AnnotationRecover: "rejoin", "example.com/keep": "me"})
	node := newNode(t, kc, nil)
	r := nodereport.NewPodReporter(kc, pod.Namespace, pod.Name, node.Name, "etcd-agent-test", zaptest.NewLogger(t))
	t.Cleanup(r.Shutdown)
	if err := r.ClearRequest(ctx); err != nil {
		t.Fatal(err)
	}
	lr := nodereport.LastRecovery{Request: "rejoin", Result: nodereport.ResultSucceeded, Phase: "done",
		StartedAt: time.Unix(100, 0).UTC(), FinishedAt: time.Unix(130, 0).UTC()}
	if err := r.SetLastRecovery(ctx, lr); err != nil {
		t.Fatal(err)
	}
	r.Eventf(corev1.EventTypeNormal, nodereport.ReasonRecoverySucceeded, "member %s: rejoined", pod.Name)
	after, err := kc.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := after.Annotations[nodereport.AnnotationRecover]; ok || after.Annotations["example.com/keep"] != "me" {
		t.Fatalf("pod annotations after ClearRequest: %v", after.Annotations)
	}
	got, ok, err := nodereport.LastRecoveryFrom(after.Annotations)
	if err != nil || !ok || got.Result != nodereport.ResultSucceeded || !got.FinishedAt.Equal(lr.FinishedAt) {
		t.Fatalf("last-recovery on the pod: %+v %v %v", got, ok, err)
	}
	if n := getNode(t, kc, node.Name); n.Annotations[nodereport.AnnotationLastRecovery] != "" {
		t.Fatal("a pod reporter wrote the Node")
	}
	eventually(t, 15*time.Second, "the event on the pod", func() error {
		evs, err := kc.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Pod", "involvedObject.name": pod.Name, "involvedObject.uid": string(pod.UID)}.String()})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == nodereport.ReasonRecoverySucceeded && e.Source.Host == node.Name {
				return nil
			}
		}
		return fmt.Errorf("%d events, none RecoverySucceeded from %s", len(evs.Items), node.Name)
	})
	// And on the member's Node (issue 14): `kubectl describe node` shows
	// what the agent did to the etcd pods on it, each naming its pod.
	eventually(t, 15*time.Second, "the event on the Node", func() error {
		evs, err := kc.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Node", "involvedObject.name": node.Name}.String()})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == nodereport.ReasonRecoverySucceeded && strings.Contains(e.Message, pod.Namespace+"/"+pod.Name) {
				return nil
			}
		}
		return fmt.Errorf("%d events on the Node, none RecoverySucceeded naming the pod", len(evs.Items))
	})
}
