package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/clusterrecord"
	"github.com/etcd-agent/etcd-agent/internal/controller/steward"
	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// podGoneGrace: a member whose pod has been absent this long (and which is
// not mid-recovery) is no longer served. The pod runtime deletes the pod
// itself to stop etcd, and its controller re-creates it within seconds.
const podGoneGrace = time.Minute

// MemberStateDir is a pod member's state dir under the agent's: the start
// gate in the pod must be given the same folder (its --state-dir, through a
// hostPath volume) to read the member's pin, journal and hold.
func MemberStateDir(stateDir, namespace, pod string) string {
	return filepath.Join(stateDir, "members", namespace+"_"+pod)
}

// runPods serves every etcd pod bound to this node that matches the
// selector (--member-source=pods): one observation loop, journal and state
// dir per member, all sharing one API client, one pod informer and the
// metrics registry (each member's series labelled with its cluster).
func runPods(ctx context.Context, c Config, m *metrics.Metrics, ready *atomic.Bool, metricsAddr string) error {
	kc, err := c.KubeClient(m)
	if err != nil {
		return fmt.Errorf("--member-source=pods needs the Kubernetes API: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + c.NodeName
		o.LabelSelector = c.PodSelector
	}))
	pods := f.Core().V1().Pods()
	wake := make(chan struct{}, 1)
	nudge := func(any) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: nudge,
		UpdateFunc: func(_, o any) { nudge(o) }, DeleteFunc: nudge}); err != nil {
		return err
	}
	// The steward looks at the member pods of its clusters on other nodes,
	// and at Nodes.
	everyNode := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = c.PodSelector
	}))
	allPods := everyNode.Core().V1().Pods()
	nodesF := informers.NewSharedInformerFactory(kc, 0)
	nodes := nodesF.Core().V1().Nodes()
	allPods.Informer()
	nodes.Informer()
	for _, fac := range []informers.SharedInformerFactory{f, everyNode, nodesF} {
		fac.Start(ctx.Done())
		defer fac.Shutdown()
	}
	c.Log.Info("serving the etcd pods bound to this node", zap.String("node", c.NodeName), zap.String("selector", c.PodSelector),
		zap.String("stateDir", c.StateDir), zap.String("metrics", metricsAddr))
	for !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced, allPods.Informer().HasSynced, nodes.Informer().HasSynced) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	ready.Store(true)
	c.probeSlots = make(chan struct{}, max(1, c.ProbeWorkers))
	pm := &podMembers{c: c, kc: kc, m: m, ready: ready, metricsAddr: metricsAddr, lister: pods.Lister(),
		allPods: allPods.Lister(), nodes: nodes.Lister(),
		vols: apiVolumes{kc: kc}, workers: map[string]*podWorker{}, readRV: map[string]string{}, log: c.Log}
	defer pm.stopAll()
	t := time.NewTicker(c.PollInterval)
	defer t.Stop()
	for {
		pm.reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-t.C:
		}
	}
}

// podMembers keeps one worker per member pod of this node.
type podMembers struct {
	c           Config
	kc          kubernetes.Interface
	m           *metrics.Metrics
	ready       *atomic.Bool
	metricsAddr string
	lister      corelisters.PodLister
	allPods     corelisters.PodLister // member pods on every node (the steward's)
	nodes       corelisters.NodeLister
	vols        membersource.Volumes
	log         *zap.Logger

	workers map[string]*podWorker
	readRV  map[string]string // the pod version each worker's member was read from
	// unreadable remembers the last error per pod, to say it once.
	unreadable map[string]string
}

// podWorker runs one member's loop.
type podWorker struct {
	member   membersource.PodMember
	stateDir string
	cancel   context.CancelFunc
	done     chan struct{}
	goneAt   time.Time // when its pod was last seen missing

	mu  sync.Mutex
	cur membersource.PodMember // the pod as last read (the gate check reads it)

	// requests carries the pod's recover annotation to the member's loop.
	requests chan request
}

func (w *podWorker) current() membersource.PodMember {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

func (w *podWorker) setCurrent(pm membersource.PodMember) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur = pm
}

// reconcile starts a worker for each member pod, restarts one whose
// identity changed, and ends one whose pod is gone, never mid-recovery.
func (p *podMembers) reconcile(ctx context.Context) {
	pods, err := p.lister.List(labels.Everything())
	if err != nil {
		p.log.Error("listing this node's etcd pods", zap.Error(err))
		return
	}
	seen := map[string]bool{}
	for _, pod := range pods {
		key := pod.Namespace + "/" + pod.Name
		seen[key] = true
		w := p.workers[key]
		if pod.DeletionTimestamp != nil {
			continue // going: its successor is read when it comes
		}
		if w != nil {
			if req, ok, err := nodereport.ParsePodRequest(pod.Annotations); ok {
				select {
				case w.requests <- request{req: req, err: err}:
				default: // one pending request is enough; the annotation stays until handled
				}
			}
		}
		if w != nil && p.readRV[key] == pod.ResourceVersion && (sameMember(w.member, w.current()) || p.midRecovery(w)) {
			w.goneAt = time.Time{}
			continue // read already (the PVC and PV are asked once per change of the pod)
		}
		// (A pod read while its recovery ran and found on a new claim is
		// read again once the recovery ended, and its loop restarted.)
		member, err := membersource.FromPod(pod, p.vols, p.c.KubeletPodsDir)
		if err == nil && !member.DataDirPerPod { // a per-pod dir appears with the pod
			err = visibleOnNode(member.Identity, p.c.NodePaths)
		}
		if err != nil {
			p.sayUnreadable(key, err)
			continue
		}
		p.sayUnreadable(key, nil)
		p.readRV[key] = pod.ResourceVersion
		if w != nil {
			w.goneAt = time.Time{}
			w.setCurrent(member)
			if sameMember(w.member, member) {
				continue
			}
			if p.midRecovery(w) {
				continue // the journal resumes under the identity it started with
			}
			p.log.Info("member pod changed identity; restarting its loop", zap.String("pod", key),
				zap.String("dataDir", member.Identity.DataDir), zap.String("was", w.member.Identity.DataDir))
			p.stop(key)
		}
		p.start(ctx, member)
	}
	for key, w := range p.workers {
		if seen[key] {
			continue
		}
		if w.goneAt.IsZero() {
			w.goneAt = time.Now()
		}
		if time.Since(w.goneAt) >= podGoneGrace && !p.midRecovery(w) {
			p.log.Info("member pod gone from this node; no longer serving it", zap.String("pod", key))
			p.stop(key)
		}
	}
}

// sameMember: b is the member a's loop serves. A new claim or a new
// controller (a StatefulSet deleted with orphans and created again) starts
// the loop again: its state dir and record are read anew. So do other TLS
// files for the gate (its TLS config is built for them); the same files of
// a re-created pod, under its new UID, are followed (podClientTLS).
func sameMember(a, b membersource.PodMember) bool {
	return reflect.DeepEqual(a.Identity, b.Identity) && a.Cluster == b.Cluster && a.GateStateDir == b.GateStateDir &&
		a.PVCUID == b.PVCUID && controllerUID(a) == controllerUID(b) && membersource.SameFiles(a.ClientTLS, a.UID, b.ClientTLS, b.UID)
}

func controllerUID(pm membersource.PodMember) types.UID {
	if pm.Controller == nil {
		return ""
	}
	return pm.Controller.UID
}

// podRecord is a pod member's cluster record, as its pod is now: owned by
// the pod's StatefulSet, its pin naming the claim it is on, written only
// while the pod is bound to this node on that claim (an agent whose member
// moved away must not write its old pin over the new one).
type podRecord struct {
	kc   kubernetes.Interface
	node string
	cur  func() membersource.PodMember
}

func (r podRecord) store() clusterrecord.Store {
	pm := r.cur()
	return clusterrecord.Store{KC: r.kc, Namespace: pm.Namespace, Cluster: pm.Cluster, Owner: pm.Controller}
}

func (r podRecord) ReadPins(ctx context.Context) (map[string]pin.Pin, bool, error) {
	return r.store().ReadPins(ctx)
}

func (r podRecord) WritePin(ctx context.Context, p pin.Pin, first bool) error {
	pm := r.cur()
	pod, err := r.kc.CoreV1().Pods(pm.Namespace).Get(ctx, pm.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pod.Spec.NodeName != r.node || pod.UID != pm.UID {
		return fmt.Errorf("pod %s is no longer the one this agent serves (now on node %q): its pin is not written", pm.Key, pod.Spec.NodeName)
	}
	if pm.PVC != "" {
		c, err := r.kc.CoreV1().PersistentVolumeClaims(pm.Namespace).Get(ctx, pm.PVC, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.UID != pm.PVCUID {
			return fmt.Errorf("claim %s/%s is %s now, not %s: the pin is not written", pm.Namespace, pm.PVC, c.UID, pm.PVCUID)
		}
	}
	p.ClaimName, p.ClaimUID = pm.PVC, string(pm.PVCUID)
	return r.store().WritePin(ctx, p, first)
}

// Behind: the record lacks the member's pin, names no claim (written
// before claims were recorded) or another claim (WritePin then checks that
// the pod and claim are still ours), or is older on this claim.
func (r podRecord) Behind(rec pin.Pin, ok bool, ours pin.Pin) bool {
	pm := r.cur()
	return !ok || rec.ClaimName != pm.PVC || rec.ClaimUID != string(pm.PVCUID) || rec.SeenAt.Before(ours.SeenAt)
}

func (r podRecord) Where() string { return r.store().Where() }

func (p *podMembers) sayUnreadable(key string, err error) {
	if p.unreadable == nil {
		p.unreadable = map[string]string{}
	}
	if err == nil {
		delete(p.unreadable, key)
		return
	}
	if p.unreadable[key] == err.Error() {
		return
	}
	p.unreadable[key] = err.Error()
	if errors.Is(err, membersource.ErrNotReady) {
		p.log.Info("member pod not readable yet", zap.String("pod", key), zap.Error(err))
		return
	}
	p.log.Warn("cannot serve this etcd pod: its member cannot be read", zap.String("pod", key), zap.Error(err))
}

// midRecovery: the member's journal has a recovery under way.
func (p *podMembers) midRecovery(w *podWorker) bool {
	j, _, err := journal.Load(w.stateDir, w.member.Identity.Name)
	return err != nil || j.Active()
}

func (p *podMembers) start(ctx context.Context, member membersource.PodMember) {
	stateDir := MemberStateDir(p.c.StateDir, member.Namespace, member.Name)
	var w *podWorker
	log := p.log.With(zap.String("pod", member.Key), zap.String("cluster", member.Cluster))
	memberTLS, err := podClientTLS(member.ClientTLS, func() membersource.PodMember { return w.current() }, log)
	if err != nil {
		err = fmt.Errorf("pod %s: the client cert its start gate uses, which the agent reaches the member with: %w", member.Key, err)
	} else {
		err = claimStateDir(stateDir, member, member.Identity.Name, p.log)
	}
	if err != nil {
		p.sayUnreadable(member.Key, err)
		delete(p.readRV, member.Key) // looked at again at the next tick
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	w = &podWorker{member: member, stateDir: stateDir, cancel: cancel, done: make(chan struct{}), cur: member, requests: make(chan request, 1)}
	p.workers[member.Key] = w
	c := p.c
	c.StateDir = stateDir
	c.QuarantineDir = "" // beside the data dir, or inside a PV's root: on the PV's own filesystem
	c.DataDirVolumeRoot, c.WALDirMountRoot = member.DataDirVolumeRoot, member.Identity.WALDirMountRoot
	c.EnableV2 = member.Identity.EnableV2
	c.StaticPodManifest = ""
	c.MemberName, c.DataDir, c.WALDir, c.ClientURL, c.PeerURLs = member.Identity.Name, member.Identity.DataDir, member.Identity.WALDir, member.Identity.ClientURL, member.Identity.PeerURLs
	c.Endpoints = member.Endpoints
	if memberTLS != nil {
		c.memberTLS = memberTLS
	}
	c.Log = log
	urls := append([]string{member.Identity.ClientURL}, member.Identity.PeerURLs...)
	c.podImage = func() string { return w.current().Image }
	if p.kc != nil {
		c.podImage = (&podLearnerImage{kc: p.kc, ns: member.Namespace, pod: member.Name}).get
	}
	c.podRuntime = memberruntime.NewPod(member.Key, podDeleter{kc: p.kc, ns: member.Namespace, name: member.Name, node: p.c.NodeName,
		check: func(ctx context.Context, pod *corev1.Pod) error { return p.onClaim(ctx, pod, member) }}, stateDir,
		func() error { return p.stoppable(w.current(), stateDir, &member) }, urls, member.Identity.DataDir, c.Log, memberruntime.StopTimeout(c.StopTimeout))
	c.claims = podClaims{kc: p.kc, node: p.c.NodeName, cur: w.current, ungated: func() error { return p.stoppable(w.current(), stateDir, nil) },
		openStore: c.openStore()}
	seed, err := storeSeedOf(member)
	if err != nil {
		c.Log.Warn("the member's PV names a move's snapshot that cannot be read; its learner is seeded as any other", zap.Error(err))
	}
	c.storeSeed = seed
	podRep := nodereport.NewPodReporter(p.kc, member.Namespace, member.Name, p.c.NodeName, "etcd-agent", c.Log)
	env := memberEnv{metrics: p.m.ForCluster(member.Cluster), ready: p.ready, kc: p.kc, metricsAddr: p.metricsAddr,
		gateWrapped: func() bool { return gatedOn(w.current(), stateDir) == nil },
		podReporter: podRep, requests: w.requests,
		pinRecord: podRecord{kc: p.kc, node: p.c.NodeName, cur: w.current},
		requestNow: func(ctx context.Context) (request, bool) {
			return podRequestNow(ctx, p.kc, member.Namespace, member.Name)
		}}
	t, err := c.TLSConfig()
	if err != nil {
		p.log.Error("etcd client TLS", zap.Error(err))
	}
	env.steward = steward.New(steward.Config{NodeName: c.NodeName, Namespace: c.Namespace, LeaseTTL: c.LeaseTTL, GracePeriod: c.GracePeriod,
		NodeLostGrace: c.NodeLostGrace, AutoHeal: c.AutoHeal, DryRun: c.DryRun}, p.kc, w.current, p.allPods, p.nodes, t, env.metrics, c.Log.Named("steward"))
	go func() {
		defer close(w.done)
		defer podRep.Shutdown()
		for wctx.Err() == nil {
			err := runMember(wctx, c, member.Identity, env)
			if wctx.Err() != nil {
				return
			}
			c.Log.Error("member loop ended; restarting it", zap.Error(err))
			select {
			case <-wctx.Done():
			case <-time.After(5 * c.PollInterval):
			}
		}
	}()
}

// podRequestNow re-reads the pod's request: acted on only while its
// trigger annotation is there, and as it is now (nextRequest).
func podRequestNow(ctx context.Context, kc kubernetes.Interface, ns, name string) (request, bool) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := kc.CoreV1().Pods(ns).Get(rctx, name, metav1.GetOptions{})
	if err != nil {
		return request{}, false
	}
	r, ok, err := nodereport.ParsePodRequest(p.Annotations)
	return request{req: r, err: err}, ok
}

// gatedOn: the member's pod runs etcd through the start gate, reading
// stateDir (plan.PodGateHolds).
func gatedOn(pm membersource.PodMember, stateDir string) error {
	return plan.PodGateHolds(plan.PodGate{Wrapped: pm.GateWrapped, StateDir: pm.GateStateDir, MemberSource: pm.GateMemberSource}, stateDir)
}

func (p *podMembers) stop(key string) {
	w := p.workers[key]
	if w == nil {
		return
	}
	w.cancel()
	<-w.done
	// Its series go with it: stale values (a quorum margin of 0, "lost")
	// would keep alerts firing on this node.
	p.m.ForCluster(w.member.Cluster).Forget(w.member.Identity.Name)
	delete(p.workers, key)
	delete(p.readRV, key)
}

func (p *podMembers) stopAll() {
	for key := range p.workers {
		p.stop(key)
	}
}

// apiVolumes reads PVCs and PVs from the API, each bounded.
type apiVolumes struct{ kc kubernetes.Interface }

func (v apiVolumes) PVC(ns, name string) (*corev1.PersistentVolumeClaim, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return v.kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
}

func (v apiVolumes) PV(name string) (*corev1.PersistentVolume, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return v.kc.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
}

// leftNothingOnTheClaim: the open recovery j in dir did nothing to its
// claim's member, so that the dir may be set aside for a new claim: a pod
// move that released the claim and died before closing its journal (its
// member was removed), or an attempt that got no further than its start and
// never held the member at its gate (the hold comes before the pod's
// delete, and the quarantine after the stop), as one cancelled when its
// loop restarts under the new claim. (Not a rollback: its removal of a
// stranded learner runs in phase started.)
func leftNothingOnTheClaim(dir string, j journal.Record) bool {
	if j.Request == plan.ActionMoveAway && j.Phase.AtLeast(journal.PhaseRemoved) && !j.ClaimReleasedAt.IsZero() {
		return true
	}
	_, held, err := memberruntime.ReadHold(dir)
	return err == nil && !held && j.Kind == "" && !j.Phase.AtLeast(journal.PhaseStopped)
}

// claimFile records, in a member state dir, the claim (PVC UID) its member
// ran on: a dir keyed by namespace and pod name outlives the pod, and a
// later pod of that name on a new claim (its cluster deleted and created
// again) is another member.
const claimFile = "claim.json"

// claimStateDir makes dir the state dir of pm's claim: a dir recorded for
// another claim is renamed aside (<dir>.<old claim>.<time>, never deleted)
// unless a recovery is open in it; then the member is not served until a
// person looks. A member without a claim (hostPath) keeps its dir.
func claimStateDir(dir string, pm membersource.PodMember, member string, log *zap.Logger) error {
	if pm.PVCUID == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, claimFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case strings.TrimSpace(string(b)) == string(pm.PVCUID):
		return nil
	default:
		old := strings.TrimSpace(string(b))
		if j, _, err := journal.Load(dir, member); err != nil || j.Active() && !leftNothingOnTheClaim(dir, j) {
			return fmt.Errorf("state dir %s belongs to claim %s, the pod now runs on claim %s, and a recovery is open in it (%v): not set aside; look at it by hand",
				dir, old, pm.PVCUID, err)
		}
		aside := fmt.Sprintf("%s.%s.%s", dir, old, time.Now().UTC().Format("20060102T150405Z"))
		if err := os.Rename(dir, aside); err != nil {
			return err
		}
		log.Warn("the member's pod runs on a new claim: its earlier state dir (pin, journal) is another member's; set aside",
			zap.String("pod", pm.Namespace+"/"+pm.Name), zap.String("was", aside), zap.String("claim", string(pm.PVCUID)))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, claimFile), []byte(string(pm.PVCUID)+"\n"), 0o644)
}
