package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// KubeletConfig makes the supervisor the lab kubelet of one Node as well:
// it registers the Node, keeps its status and node Lease fresh, and runs the
// API pods bound to it as processes.
type KubeletConfig struct {
	Client     kubernetes.Interface
	NodeName   string
	NodeIP     string
	NodeLabels map[string]string
	// PodIPSalt makes pod IPs differ between labs on one machine.
	PodIPSalt string
	// Heartbeat is how often Node status and the node Lease are renewed.
	Heartbeat time.Duration
	// PodsDir holds each pod's emptyDir volumes.
	PodsDir string
}

// apiPod is one API pod this node runs.
type apiPod struct {
	uid         types.UID
	ip          string
	runner      *podRunner
	started     time.Time
	terminating bool
}

type kubelet struct {
	sup    *Supervisor
	cfg    KubeletConfig
	log    *zap.Logger
	pods   cache.Indexer
	queue  workqueue.TypedRateLimitingInterface[string] // pod keys to sync
	status workqueue.TypedRateLimitingInterface[string] // pod keys whose status to write

	// runCtx lives as long as the kubelet: pods run under it, not under
	// the bounded context of the sync that started them.
	runCtx context.Context

	mu         sync.Mutex
	running    map[string]*apiPod // by namespace/name
	conditions map[corev1.NodeConditionType]nodeCondition
}

func newKubelet(s *Supervisor, cfg KubeletConfig) (*kubelet, error) {
	if cfg.Client == nil || cfg.NodeName == "" || cfg.NodeIP == "" || cfg.PodsDir == "" {
		return nil, errors.New("lab kubelet: client, node name, node IP and pods dir are required")
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 5 * time.Second
	}
	return &kubelet{sup: s, cfg: cfg, log: s.cfg.Log.With(zap.String("node", cfg.NodeName)), running: map[string]*apiPod{},
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		status: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
	}, nil
}

// run registers the Node, then syncs pods until ctx ends. Every API call is
// bounded; a failing API only delays status, never the running processes.
func (k *kubelet) run(ctx context.Context) {
	k.runCtx = ctx
	go k.heartbeat(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.NodeName).String()
	}))
	inf := f.Core().V1().Pods().Informer()
	k.pods = inf.GetIndexer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
			// Someone else may have written the status (the node-lifecycle
			// controller marks pods not Ready): put ours back, as the
			// kubelet's status manager does (equal statuses are not written).
			k.status.Add(key)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue})
	f.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
		k.status.ShutDown()
	}()
	for !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		if ctx.Err() != nil {
			return
		}
	}
	k.log.Info("lab kubelet: pod cache synced")
	go k.work(ctx, k.status, k.writeStatus)
	k.work(ctx, k.queue, k.syncPod)
}

func (k *kubelet) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := sync(cctx, key)
		cancel()
		if err != nil && ctx.Err() == nil {
			k.log.Warn("lab kubelet: will retry", zap.String("pod", key), zap.Error(err))
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// syncPod starts a pod bound here, stops one being deleted (with its grace
// period, then finishes its deletion as the kubelet does) and kills one
// that vanished from the API (force-deleted).
func (k *kubelet) syncPod(ctx context.Context, key string) error {
	obj, exists, err := k.pods.GetByKey(key)
	if err != nil {
		return err
	}
	k.mu.Lock()
	cur := k.running[key]
	k.mu.Unlock()
	var pod *corev1.Pod
	if exists {
		pod = obj.(*corev1.Pod)
	}
	terminating := cur != nil && k.isTerminating(cur)
	if cur != nil && (pod == nil || pod.UID != cur.uid) {
		// Force-deleted (or replaced): stop at once, or sooner than planned.
		k.log.Info("lab kubelet: pod gone from the API; killing its containers", zap.String("pod", key))
		if terminating {
			cur.runner.stopWithin(minGrace) // the stop under way waits, then forgets it
			return nil
		}
		k.stopPod(key, cur, minGrace)
		cur = nil
	}
	if pod == nil {
		return nil
	}
	grace := max(time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 30))*time.Second, minGrace)
	if terminating {
		cur.runner.stopWithin(grace) // a second delete may shorten the grace
		return nil
	}
	if pod.DeletionTimestamp != nil {
		if cur == nil {
			return k.finishDeletion(ctx, pod)
		}
		k.log.Info("lab kubelet: pod deleted; stopping its containers", zap.String("pod", key), zap.Duration("grace", grace))
		k.mu.Lock()
		cur.terminating = true
		k.mu.Unlock()
		go func() {
			k.stopPod(key, cur, grace)
			k.queue.Add(key) // finishes the deletion
		}()
		return nil
	}
	if cur != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	return k.startPod(ctx, key, pod)
}

func (k *kubelet) startPod(ctx context.Context, key string, pod *corev1.Pod) error {
	mounts, err := k.volumes(ctx, pod)
	if err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	ip := PodIP(k.cfg.PodIPSalt, pod.Namespace, pod.Name)
	fields := podFields(pod, ip, k.cfg.NodeIP)
	pr := newPodRunner(k.sup, key, string(pod.UID), pod.DeepCopy())
	pr.logName = pod.Namespace + "_" + pod.Name
	pr.grace = time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, 30)) * time.Second
	pr.launch = func(c corev1.Container) (launchSpec, error) { return apiLaunch(c, fields, mounts) }
	pr.onChange = func() { k.status.Add(key) }
	ap := &apiPod{uid: pod.UID, ip: ip, runner: pr, started: time.Now()}
	k.mu.Lock()
	k.running[key] = ap
	k.mu.Unlock()
	k.sup.addAPIPod(key, pr)
	k.log.Info("lab kubelet: starting pod", zap.String("pod", key), zap.String("podIP", ip))
	pr.start(k.runCtx)
	go k.probe(k.runCtx, key, ap)
	k.status.Add(key)
	return nil
}

// minGrace is the least time a deleted pod's containers get between SIGTERM
// and SIGKILL, force-deleted ones too (the kubelet's minimum).
const minGrace = 2 * time.Second

func (k *kubelet) isTerminating(ap *apiPod) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return ap.terminating
}

// stopPod stops a pod's containers within grace and forgets it.
func (k *kubelet) stopPod(key string, ap *apiPod, grace time.Duration) {
	ap.runner.stopWithin(grace)
	k.mu.Lock()
	if k.running[key] == ap {
		delete(k.running, key)
	}
	k.mu.Unlock()
	k.sup.removeAPIPod(key, ap.runner)
}

// finishDeletion removes a deleted pod whose containers are gone, as the
// kubelet does once it has stopped them: a zero-grace delete of this UID.
func (k *kubelet) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	err := k.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err == nil {
		k.log.Info("lab kubelet: pod deletion finished", zap.String("pod", pod.Namespace+"/"+pod.Name))
	}
	return err
}

// stopAll stops every API pod (the supervisor is stopping), each within
// its own grace but no longer than the supervisor's stop timeout.
func (k *kubelet) stopAll() {
	k.mu.Lock()
	pods := k.running
	k.running = map[string]*apiPod{}
	k.mu.Unlock()
	var wg sync.WaitGroup
	for key, ap := range pods {
		wg.Add(1)
		go func() { defer wg.Done(); k.stopPod(key, ap, k.sup.cfg.StopTimeout) }()
	}
	wg.Wait()
}

// every runs f every interval until ctx ends (f's own calls are bounded).
func every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	wait.UntilWithContext(ctx, f, interval)
}
