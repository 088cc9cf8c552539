package nodereport

import (
	"context"
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// WatchRequests watches this one Node (field selector metadata.name) and
// calls onRequest for each add or update whose trigger annotations are
// present, with ParseRequest's error for a value it does not understand.
// It returns nil when ctx ends; the informer retries API errors by itself.
//
// A Node is updated for many reasons, so the same request is delivered again
// on later updates until ClearRequest removes it: onRequest must ignore a
// request it is already handling. It is never called twice for the same
// resourceVersion (an informer resync or relist repeats objects), and calls
// are sequential; a slow onRequest delays the next one.
func WatchRequests(ctx context.Context, kc kubernetes.Interface, nodeName string, onRequest func(req Request, err error)) error {
	return WatchNode(ctx, kc, nodeName, func(n *corev1.Node) {
		if req, ok, err := ParseRequest(n.Annotations); ok {
			onRequest(req, err)
		}
	})
}

// WatchNode watches this one Node and calls onNode for each add or update,
// once per resourceVersion, sequentially, until ctx ends (the informer
// retries API errors by itself). The agent learns of its requests (and of
// a move's) here, without asking the API from its observation loop.
func WatchNode(ctx context.Context, kc kubernetes.Interface, nodeName string, onNode func(n *corev1.Node)) error {
	if nodeName == "" {
		return errors.New("watch node requests: node name is empty")
	}
	factory := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
	}))
	informer := factory.Core().V1().Nodes().Informer()

	var mu sync.Mutex
	var lastRV string
	deliver := func(obj any) {
		n, ok := obj.(*corev1.Node)
		// The name check is for clients that ignore field selectors (fakes).
		if !ok || n.Name != nodeName {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if n.ResourceVersion == lastRV {
			return
		}
		lastRV = n.ResourceVersion
		onNode(n)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    deliver,
		UpdateFunc: func(_, obj any) { deliver(obj) },
	}); err != nil {
		return err
	}
	factory.StartWithContext(ctx)
	<-ctx.Done()
	factory.Shutdown() // waits for the informer's goroutines
	return nil
}
