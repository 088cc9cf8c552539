package nodereport_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
)

// shared is the one real etcd + kube-apiserver every test in this package
// uses; tests keep apart by using objects of their own.
var shared = labtest.NewShared("nodereport", lab.Options{Nodes: 1})

func TestMain(m *testing.M) { shared.Main(m) }

func restConfig(t *testing.T) *rest.Config { return shared.RestConfig(t) }

func newClient(t *testing.T) kubernetes.Interface { return shared.KubeClient(t) }

// newNode creates a Node object of the test's own (the lab's nodes belong
// to the lab) and deletes it when the test ends.
func newNode(t *testing.T, kc kubernetes.Interface, annotations map[string]string) *corev1.Node {
	t.Helper()
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", t.Name(), time.Now().UnixNano())
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nodereport-%08x", h.Sum32()), Annotations: annotations}}
	ctx := ctxFor(t, 10*time.Second)
	n, err := kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := kc.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete node %s: %v", n.Name, err)
		}
	})
	return n
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	labtest.Eventually(t, d, what, cond)
}
