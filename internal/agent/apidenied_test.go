package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/etcd-agent/etcd-agent/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Review item (issue 41): a write the API denies (RBAC, the node-scope
// policy) was only in its caller's log line. Every 403 now counts in
// etcd_agent_kube_api_denied_total{resource,verb} (EtcdAgentAPIDenied) and
// is logged, once per resource and verb for a while.
func TestTheAgentsAPIClientCountsAndLogsDenials(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"denied by the node-scope policy"}`))
	}))
	defer srv.Close()
	m := metrics.New()
	core, logs := observer.New(zap.InfoLevel)
	cfg := &rest.Config{Host: srv.URL}
	countDenials(cfg, m, zap.New(core))
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		_, _ = kc.CoreV1().Nodes().Patch(ctx, "node2", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{})
	}
	_, _ = kc.CoordinationV1().Leases("etcd-agent").Get(ctx, "x", metav1.GetOptions{})
	_, _ = kc.CoreV1().Nodes().UpdateStatus(ctx, readyNode("node2", nil), metav1.UpdateOptions{})
	for _, c := range []struct {
		resource, verb string
		want           float64
	}{{"nodes", "patch", 2}, {"leases.coordination.k8s.io", "get", 1}, {"nodes/status", "update", 1}} {
		if got := testutil.ToFloat64(m.KubeAPIDenied.WithLabelValues(c.resource, c.verb)); got != c.want {
			t.Errorf("denied %s %s: %v, want %v", c.verb, c.resource, got, c.want)
		}
	}
	if n := logs.FilterMessage("the Kubernetes API denied the agent a request").Len(); n != 3 {
		t.Errorf("%d denial lines logged, want 3 (the second patch of nodes within the quiet time is counted, not logged): %v", n, logs.All())
	}
}

func readyNode(name string, ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}
