package nodereport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
)

// flushTimeout bounds how long Shutdown waits for queued Events: an agent
// being stopped should not hang on an API server that is down.
const flushTimeout = 5 * time.Second

// Reporter writes Events and annotations on one Node, or on one member
// pod (--member-source=pods: the pod is the member's object, as the Node is
// a static-pod member's).
type Reporter struct {
	kc   kubernetes.Interface
	node string
	// pod, when set, is the object reported on ("namespace/name").
	podNamespace, pod string
	log               *zap.Logger

	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder

	refOnce sync.Once
	ref     *corev1.ObjectReference

	mu      sync.Mutex // guards stopped against Eventf racing Shutdown
	stopped bool
	queued  atomic.Int64 // Events handed to the broadcaster
	written atomic.Int64 // Events the API server accepted
}

// NewReporter returns a Reporter for nodeName; component is the Event
// source ("etcd-agent"). Call Shutdown when done.
func NewReporter(kc kubernetes.Interface, nodeName, component string, log *zap.Logger) *Reporter {
	if log == nil {
		log = zap.NewNop()
	}
	r := &Reporter{kc: kc, node: nodeName, log: log.With(zap.String("node", nodeName))}
	r.broadcaster = record.NewBroadcaster()
	r.broadcaster.StartRecordingToSink(&countingSink{
		EventSink: &typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")}, written: &r.written})
	r.recorder = r.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: nodeName})
	return r
}

// NewPodReporter returns a Reporter for the member pod namespace/name on
// nodeName. Call Shutdown when done.
func NewPodReporter(kc kubernetes.Interface, namespace, name, nodeName, component string, log *zap.Logger) *Reporter {
	r := NewReporter(kc, nodeName, component, log)
	r.podNamespace, r.pod = namespace, name
	r.log = r.log.With(zap.String("pod", namespace+"/"+name))
	return r
}

// Eventf records an Event on the Node (or on the pod and its Node); eventType is corev1.EventTypeNormal
// or corev1.EventTypeWarning. It does not wait for the API server: Events
// are best effort, the annotation and the logs are the record.
func (r *Reporter) Eventf(eventType, reason, format string, args ...any) {
	if eventType != corev1.EventTypeNormal && eventType != corev1.EventTypeWarning {
		r.log.Error("event with an unknown type dropped", zap.String("type", eventType), zap.String("reason", reason))
		return
	}
	ref, nodeRef := r.objectRef(), (*corev1.ObjectReference)(nil)
	if r.pod != "" && r.node != "" {
		nodeRef = r.nodeRef()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		r.log.Warn("event after Shutdown dropped", zap.String("reason", reason), zap.String("message", fmt.Sprintf(format, args...)))
		return
	}
	r.queued.Add(1)
	r.recorder.Eventf(ref, eventType, reason, format, args...)
	if nodeRef != nil {
		// The Node gets it too, naming the pod: `kubectl describe node`
		// shows what the agent did to the etcd pods on it.
		r.queued.Add(1)
		r.recorder.Eventf(nodeRef, eventType, reason, "pod %s/%s: %s", r.podNamespace, r.pod, fmt.Sprintf(format, args...))
	}
}

// nodeRef looks the Node's UID up once. Without it (API down, Node not
// created yet) the Event carries the node name as UID, as the kubelet's do;
// `kubectl describe node` finds both kinds.
func (r *Reporter) objectRef() *corev1.ObjectReference {
	if r.pod == "" {
		return r.nodeRef()
	}
	// A StatefulSet pod is re-created under its name with a new UID (the
	// pod runtime deletes it to stop etcd): looked up each time, so that
	// `kubectl describe pod` shows the Event on the pod that is there.
	ref := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: r.podNamespace, Name: r.pod}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if p, err := r.kc.CoreV1().Pods(r.podNamespace).Get(ctx, r.pod, metav1.GetOptions{}); err == nil {
		ref.UID = p.UID
	}
	return ref
}

func (r *Reporter) nodeRef() *corev1.ObjectReference {
	r.refOnce.Do(func() {
		r.ref = &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: r.node, UID: types.UID(r.node)}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := r.kc.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
		if err != nil {
			r.log.Warn("looking up the node's UID for events failed; using its name", zap.Error(err))
			return
		}
		r.ref.UID = n.UID
	})
	return r.ref
}

// SetLastRecovery writes lr as JSON to the Node's last-recovery annotation.
func (r *Reporter) SetLastRecovery(ctx context.Context, lr LastRecovery) error {
	switch lr.Result {
	case ResultSucceeded, ResultFailed, ResultRefused:
	default:
		return fmt.Errorf("last recovery result %q: want %q, %q or %q", lr.Result, ResultSucceeded, ResultFailed, ResultRefused)
	}
	b, err := json.Marshal(lr)
	if err != nil {
		return err
	}
	return r.annotate(ctx, map[string]any{AnnotationLastRecovery: string(b)})
}

// SetStatus writes the agent's one-line status to AnnotationStatus.
func (r *Reporter) SetStatus(ctx context.Context, status string) error {
	return r.annotate(ctx, map[string]any{AnnotationStatus: status})
}

// ClearRequest removes the trigger annotations once the request is handled,
// so that it is not handled again after a restart. The removal is
// conditional on the Node's resourceVersion and retried on conflict, so it
// never writes a Node it has not just read.
func (r *Reporter) ClearRequest(ctx context.Context) error {
	if r.pod != "" { // a pod's move-to is its request too
		return r.clear(ctx, AnnotationRecover, AnnotationRecoverDryRun, AnnotationMoveFrom, AnnotationMoveTo)
	}
	return r.clear(ctx, AnnotationRecover, AnnotationRecoverDryRun, AnnotationMoveFrom)
}

// ClearMoveRequest removes a move's trigger (move-to and its dry-run flag)
// from the Node: the move was answered.
func (r *Reporter) ClearMoveRequest(ctx context.Context) error {
	return r.clear(ctx, AnnotationMoveTo, AnnotationRecoverDryRun)
}

// clear removes the annotations keys from the reported object.
func (r *Reporter) clear(ctx context.Context, keys ...string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := r.get(ctx)
		if errors.Is(err, errPodElsewhere) {
			return nil // another node's agent's request now
		}
		if err != nil {
			return err
		}
		clear := map[string]any{}
		for _, a := range keys {
			if _, ok := obj.GetAnnotations()[a]; ok {
				clear[a] = nil
			}
		}
		if len(clear) == 0 {
			return nil
		}
		return r.patchAnnotations(ctx, obj.GetResourceVersion(), clear)
	})
}

// errPodElsewhere: the member's pod of that name is bound to another node
// (a move re-created it there): its annotations are that node's agent's.
var errPodElsewhere = errors.New("the pod is bound to another node")

// get reads the reported object: a pod only while it is bound to this
// reporter's node, or to none yet (errPodElsewhere otherwise).
func (r *Reporter) get(ctx context.Context) (metav1.Object, error) {
	if r.pod != "" {
		p, err := r.kc.CoreV1().Pods(r.podNamespace).Get(ctx, r.pod, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("read pod %s/%s: %w", r.podNamespace, r.pod, err)
		}
		if on := p.Spec.NodeName; on != "" && r.node != "" && on != r.node {
			return nil, fmt.Errorf("pod %s/%s is on node %s, not %s: %w", r.podNamespace, r.pod, on, r.node, errPodElsewhere)
		}
		return p, nil
	}
	n, err := r.kc.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", r.node, err)
	}
	return n, nil
}

// patchAnnotations sends a JSON merge patch of the Node's annotations (a nil
// value removes the key); with resourceVersion set the API server rejects it
// with a Conflict if the Node changed since.
func (r *Reporter) patchAnnotations(ctx context.Context, resourceVersion string, annotations map[string]any) error {
	meta := map[string]any{"annotations": annotations}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if r.pod != "" {
		if _, err := r.kc.CoreV1().Pods(r.podNamespace).Patch(ctx, r.pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("annotate pod %s/%s: %w", r.podNamespace, r.pod, err)
		}
		return nil
	}
	if _, err := r.kc.CoreV1().Nodes().Patch(ctx, r.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate node %s: %w", r.node, err)
	}
	return nil
}

// annotate writes annotations on the reported object. A pod is read
// first and written only while it is bound to this reporter's node (or to
// none yet), conditional on the version read, so that a pod re-created on
// another node meanwhile is never written: after a move, the pod of that
// name and its last-recovery (the move's answer) are the target agent's.
// Left alone, that is no error: logged, the answer stays in this agent's
// log, journal and Events.
func (r *Reporter) annotate(ctx context.Context, annotations map[string]any) error {
	if r.pod == "" {
		return r.patchAnnotations(ctx, "", annotations)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := r.get(ctx)
		if errors.Is(err, errPodElsewhere) {
			r.log.Info("the member's pod is bound to another node now: its annotations are that node's agent's; not written",
				zap.Error(err), zap.Any("annotations", annotations))
			return nil
		}
		if err != nil {
			return err
		}
		return r.patchAnnotations(ctx, obj.GetResourceVersion(), annotations)
	})
}

// Shutdown waits (up to flushTimeout) for queued Events to reach the API
// server, then stops the broadcaster: an agent that records RecoveryFailed
// and exits should not lose that Event. Safe to call more than once.
func (r *Reporter) Shutdown() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	r.stopped = true
	r.mu.Unlock()
	// The broadcaster may also merge repeated Events into one write, or drop
	// them as spam; the deadline covers both.
	_ = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, flushTimeout, true,
		func(context.Context) (bool, error) { return r.written.Load() >= r.queued.Load(), nil })
	if left := r.queued.Load() - r.written.Load(); left > 0 {
		r.log.Warn("events not confirmed by the API server before shutdown", zap.Int64("events", left))
	}
	r.broadcaster.Shutdown()
}

// countingSink counts the Events the API server accepted, for Shutdown.
type countingSink struct {
	record.EventSink
	written *atomic.Int64
}

func (s *countingSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.count(s.EventSink.Create(e))
}

func (s *countingSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.count(s.EventSink.Update(e))
}

func (s *countingSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.count(s.EventSink.Patch(e, data))
}

func (s *countingSink) count(e *corev1.Event, err error) (*corev1.Event, error) {
	if err == nil {
		s.written.Add(1)
	}
	return e, err
}
