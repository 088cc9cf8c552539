package nodereport

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// awaitNode watches Node name until answered says it holds the answer,
// through watchtools.UntilWithSync (a list, then a watch that is re-listed
// when it breaks): the answer is seen when the API sends it, not up to a
// poll later (issue 42). It ends with ctx.
func awaitNode(ctx context.Context, kc kubernetes.Interface, name string, answered func(*corev1.Node) bool) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return kc.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return kc.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	return await(ctx, lw, &corev1.Node{}, func(o runtime.Object) bool {
		n, ok := o.(*corev1.Node)
		return ok && n.Name == name && answered(n)
	})
}

// awaitPod is awaitNode for pod ns/name.
func awaitPod(ctx context.Context, kc kubernetes.Interface, ns, name string, answered func(*corev1.Pod) bool) error {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return kc.CoreV1().Pods(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return kc.CoreV1().Pods(ns).Watch(ctx, o)
		},
	}
	return await(ctx, lw, &corev1.Pod{}, func(o runtime.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Name == name && answered(p)
	})
}

// await is watchtools.UntilWithSync on one object: done when answered. A
// deletion is waited through: a member pod the StatefulSet re-creates on a
// move's target comes back as an add under its name and is looked at again.
func await(ctx context.Context, lw cache.ListerWatcher, obj runtime.Object, answered func(runtime.Object) bool) error {
	_, err := watchtools.UntilWithSync(ctx, lw, obj, nil, func(e watch.Event) (bool, error) {
		switch e.Type {
		case watch.Added, watch.Modified:
			return answered(e.Object), nil
		case watch.Error:
			return false, fmt.Errorf("watch: %v", e.Object)
		}
		return false, nil
	})
	return err
}
