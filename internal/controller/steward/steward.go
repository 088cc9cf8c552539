// Package steward frees the place of a member whose node is lost (UC1 on
// management nodes, docs/design.md §11): from one healthy pod member of its
// cluster, under the cluster's Lease, step by step as plan.DecideSteward
// says.
package steward

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/etcd-agent/etcd-agent/internal/etcdversion"
	"github.com/etcd-agent/etcd-agent/internal/podfacts"
	"slices"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
)

var everyPod = labels.Everything()

// nodeLeaseNamespace holds the kubelets' node Leases.
const nodeLeaseNamespace = "kube-node-lease"

// stewardStepTimeout bounds one steward step (an API write or a member
// removal); the Lease is confirmed for it first.
const stewardStepTimeout = 10 * time.Second

// stewardMaxSteps bounds one stewardship: remove, retain each node-local
// PV, delete each claim, delete the pod, and a spare look.
func stewardMaxSteps(claims int) int { return 3 + 2*claims }

// Steward acts, from one healthy pod member, for the members of its
// cluster whose node is lost (plan.DecideSteward): UC1 on management nodes.
type Steward struct {
	c       Config
	kc      kubernetes.Interface
	self    func() membersource.PodMember
	pods    corelisters.PodLister // every member pod, all nodes
	nodes   corelisters.NodeLister
	observe func(context.Context) memberstate.Result
	tls     *tls.Config
	m       *metrics.Metrics
	log     *zap.Logger

	said map[string]plan.Reason // per target pod: the last refusal said
	// leases: one handle per cluster, kept, so that an expired hold of a
	// dead agent is seen expiring (a handle times a holder's silence from
	// its own first look).
	leases map[uint64]*lease.Lease
	// nodeLeases: each node Lease's renewTime as last seen, and since when
	// (our clock): staleness is never judged on the kubelet's clock.
	nodeLeases map[string]seenValue
	// silentSince: since when each target member has been seen silent.
	silentSince map[string]time.Time
	now         func() time.Time
}

// Config is what the steward reads of the agent's configuration.
type Config struct {
	NodeName, Namespace string
	// LeaseTTL is the recovery Lease's; GracePeriod the member's silence
	// before it is lost; NodeLostGrace the node's NotReady time before
	// its member's place is freed.
	LeaseTTL, GracePeriod, NodeLostGrace time.Duration
	AutoHeal, DryRun                     bool
}

// ObserveWith sets how the steward observes its own member afresh (the
// agent's pipeline: observe, assess, export) before each of its steps.
func (s *Steward) ObserveWith(observe func(context.Context) memberstate.Result) { s.observe = observe }

// seenValue is a value and since when it has been seen unchanged.
type seenValue struct {
	value string
	since time.Time
}

// AnnotationRemovedMember is written on a member pod by the steward before
// it removes the member (plan.RemovedMark): only a pod so marked by this
// cluster's steward has its claim deleted and is force-deleted.
const AnnotationRemovedMember = "etcd-agent.io/removed-member"

// New is the steward of the member self on node c.NodeName.
func New(c Config, kc kubernetes.Interface, self func() membersource.PodMember, pods corelisters.PodLister, nodes corelisters.NodeLister,
	t *tls.Config, m *metrics.Metrics, log *zap.Logger) *Steward {
	return &Steward{c: c, kc: kc, self: self, pods: pods, nodes: nodes, tls: t, m: m, log: log, said: map[string]plan.Reason{},
		leases: map[uint64]*lease.Lease{}, nodeLeases: map[string]seenValue{}, silentSince: map[string]time.Time{}, now: time.Now}
}

// leaseFor is the kept Lease handle of the cluster.
func (s *Steward) leaseFor(clusterID uint64) (*lease.Lease, error) {
	if l, ok := s.leases[clusterID]; ok {
		return l, nil
	}
	l, err := lease.New(lease.Config{Client: s.kc, Namespace: s.c.Namespace, Name: lease.Name(clusterID),
		Holder: s.c.NodeName + "/" + s.self().Identity.Name + "/steward", TTL: s.c.LeaseTTL, Log: s.log})
	if err != nil {
		return nil, err
	}
	s.leases[clusterID] = l
	return l, nil
}

// consider looks, on an observation of a healthy local member, for member
// pods of the same cluster on nodes that are not Ready, and frees the
// place of any whose node is lost.
func (s *Steward) Consider(ctx context.Context, r memberstate.Result) {
	// A routine poll that reused the peers' last probe says nothing new
	// about them: the steward judges full observations only.
	if r.Observation.PeersReused || r.Verdict.State != memberstate.Healthy || r.Observation.ClusterID == 0 {
		return
	}
	self := s.self()
	siblings, err := s.pods.Pods(self.Namespace).List(everyPod)
	if err != nil {
		return
	}
	for _, p := range siblings {
		if p.Name == self.Name || membersource.ClusterOf(p) != self.Cluster || p.Spec.NodeName == "" {
			continue
		}
		if n, err := s.nodes.Get(p.Spec.NodeName); err == nil && podfacts.NodeReady(n) {
			delete(s.said, p.Name)
			continue // a Ready node's members are its own agent's (a cordoned node is Ready)
		}
		s.steward(ctx, r, p)
	}
}

// steward judges one pod on a node that is not Ready and, when its member
// is lost, takes the steps under the cluster's Lease, each re-judged on a
// fresh observation and fenced.
func (s *Steward) steward(ctx context.Context, r memberstate.Result, p *corev1.Pod) {
	key := p.Namespace + "/" + p.Name
	in, err := s.facts(ctx, r, p)
	if err != nil {
		s.log.Info("steward: cannot judge a member pod on a node that is not Ready", zap.String("target", key), zap.Error(err))
		return
	}
	d := plan.DecideSteward(in, s.cfg())
	if !s.acting(key, d) {
		return
	}
	l, err := s.leaseFor(r.Observation.ClusterID)
	if err != nil {
		s.log.Error("steward: lease", zap.Error(err))
		return
	}
	if err := l.TryAcquire(ctx, lease.Info{Target: "steward " + key, Phase: string(d.Action), StartedAt: time.Now()}); err != nil {
		s.refused(key, plan.Decision{Action: plan.Refuse, Reason: leaseReason(err), Detail: err.Error()})
		return
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Release(rctx)
	}()
	s.log.Info("steward: acting for a member on a lost node", zap.String("target", key), zap.String("node", p.Spec.NodeName))
	for step := 0; step < stewardMaxSteps(len(in.Claims)); step++ {
		fresh := s.observe(ctx)
		cur, err := s.kc.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID) {
			s.log.Info("steward: the stuck pod is gone; its StatefulSet re-creates it on a live node", zap.String("target", key))
			return
		}
		if err != nil {
			s.log.Warn("steward: re-reading the pod", zap.String("target", key), zap.Error(err))
			return
		}
		if in, err = s.facts(ctx, fresh, cur); err != nil {
			s.log.Warn("steward: re-judging", zap.String("target", key), zap.Error(err))
			return
		}
		d = plan.DecideSteward(in, s.cfg())
		if !s.acting(key, d) {
			return
		}
		// The step's deadline is set before its fence, and the fence asks
		// the Lease to outlive it: the journal write and the step itself
		// both end while no other agent can hold the Lease.
		sctx, cancel := context.WithTimeout(ctx, stewardStepTimeout)
		if err := l.ConfirmFor(sctx, stewardStepTimeout); err != nil {
			cancel()
			s.log.Warn("steward: the Lease is no longer ours; stopping", zap.String("target", key), zap.Error(err))
			return
		}
		// The journal on the Lease names the step and its claim: whoever
		// resumes re-judges from the objects, this says where it was.
		_ = l.SetPhase(sctx, strings.TrimSpace(string(d.Action)+" "+d.Claim))
		err = s.do(sctx, d, fresh, cur, in)
		cancel()
		if err != nil {
			s.log.Error("steward: step failed; judged again at the next observation", zap.String("target", key), zap.String("step", string(d.Action)), zap.Error(err))
			s.event(cur, corev1.EventTypeWarning, nodereport.ReasonRecoveryFailed, "steward %s: %s failed: %v", s.c.NodeName, d.Action, err)
			return
		}
		s.log.Info("steward: step done", zap.String("target", key), zap.String("step", string(d.Action)), zap.String("detail", d.Detail))
		s.event(cur, corev1.EventTypeNormal, nodereport.ReasonRecoveryStarted, "steward %s (node %s lost): %s: %s", s.c.NodeName, cur.Spec.NodeName, d.Action, d.Detail)
		p = cur
	}
}

func (s *Steward) cfg() plan.StewardConfig {
	return plan.StewardConfig{NodeLostGrace: s.c.NodeLostGrace, MemberGrace: s.c.GracePeriod, AutoHealOff: !s.c.AutoHeal, DryRun: s.c.DryRun}
}

// acting reports whether d is a step; a refusal is said once per change.
func (s *Steward) acting(key string, d plan.Decision) bool {
	switch d.Action {
	case plan.Refuse:
		s.refused(key, d)
		return false
	case plan.Nothing:
		delete(s.said, key)
		return false
	}
	return true
}

func (s *Steward) refused(key string, d plan.Decision) {
	if s.said[key] == d.Reason {
		return
	}
	s.said[key] = d.Reason
	s.m.RefusalsTotal.WithLabelValues(s.self().Identity.Name, string(d.Reason)).Inc()
	s.log.Info("steward: not acting for a member on a node that is not Ready", zap.String("target", key),
		zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail))
}

func leaseReason(err error) plan.Reason {
	if errors.Is(err, lease.ErrAPIUnavailable) {
		return plan.ReasonAPIUnavailable
	}
	return plan.ReasonLeaseHeldByOther
}

// facts gathers what plan.DecideSteward looks at for pod p.
func (s *Steward) facts(ctx context.Context, r memberstate.Result, p *corev1.Pod) (plan.StewardInput, error) {
	now := s.now()
	in := plan.StewardInput{Now: now, Obs: r.Observation, Local: r.Verdict, PodExists: true, PodNode: p.Spec.NodeName,
		ClusterID: r.Observation.ClusterID, RemovedMark: p.Annotations[AnnotationRemovedMember]}
	m, _, _, err := manifest.MemberOfPod(p, manifest.PodFields{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID),
		NodeName: p.Spec.NodeName, ServiceAccount: p.Spec.ServiceAccountName, PodIP: p.Status.PodIP, HostIP: p.Status.HostIP})
	if err != nil {
		return in, fmt.Errorf("its member: %w", err)
	}
	in.TargetName, in.TargetPeerURLs = m.Name, m.PeerURLs
	key := p.Namespace + "/" + p.Name
	if t, ok := memberByPeerURL(r, m.PeerURLs); ok && !t.Serving {
		if s.silentSince[key].IsZero() {
			s.silentSince[key] = now
		}
		in.TargetSilentFor = now.Sub(s.silentSince[key])
	} else {
		delete(s.silentSince, key)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var node *corev1.Node
	renewed := "no node" // the node, or its Lease, missing: stale from our first look
	node, err = s.kc.CoreV1().Nodes().Get(rctx, p.Spec.NodeName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		node = nil
	case err != nil:
		return in, err
	default:
		in.NodeExists, in.NodeReady = true, podfacts.NodeReady(node)
		renewed = "no lease"
		nl, err := s.kc.CoordinationV1().Leases(nodeLeaseNamespace).Get(rctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return in, err
		}
		if err == nil && nl.Spec.RenewTime != nil {
			renewed = nl.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		}
	}
	if seen, ok := s.nodeLeases[p.Spec.NodeName]; !ok || seen.value != renewed {
		s.nodeLeases[p.Spec.NodeName] = seenValue{value: renewed, since: now}
	}
	in.NodeLeaseStaleFor = now.Sub(s.nodeLeases[p.Spec.NodeName].since)
	// The pod comes back from its StatefulSet on a live node: its gate
	// must hold etcd there until that node's agent prepared it.
	if in.TemplateUngated, err = podfacts.TemplateUngated(rctx, s.kc, p); err != nil {
		return in, err
	}
	if sts, why, err := podfacts.ControllingStatefulSet(rctx, s.kc, p); why == "" && err == nil {
		in.LearnerVersion = etcdversion.FromImage(podfacts.RecreatedImage(p, sts))
	}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := s.kc.CoreV1().PersistentVolumeClaims(p.Namespace).Get(rctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return in, err
		}
		if pvc.Spec.VolumeName == "" {
			continue
		}
		pv, err := s.kc.CoreV1().PersistentVolumes().Get(rctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return in, err
		}
		if !pvOnNode(pv, p.Spec.NodeName, node) {
			continue // not node-local: the pod takes it along when it moves
		}
		// Every one of them: a second local claim (a WAL volume) pins
		// the re-created pod to the dead node as much as the first.
		in.Claims = append(in.Claims, plan.StewardClaim{PVC: pvc.Name, PV: pv.Name, PVExists: true, Deleting: pvc.DeletionTimestamp != nil,
			PVRetained: pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain})
	}
	return in, nil
}

// do takes one step.
func (s *Steward) do(ctx context.Context, d plan.Decision, r memberstate.Result, p *corev1.Pod, in plan.StewardInput) error {
	switch d.Action {
	case plan.RemoveMember:
		// The mark first (with the pod's UID as a precondition): after
		// it, whoever resumes knows this pod's member was removed by a
		// steward of this cluster, and only then frees its claim and pod.
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID,
			"annotations": map[string]string{AnnotationRemovedMember: plan.RemovedMark(r.Observation.ClusterID, d.MemberID)}}})
		if err != nil {
			return err
		}
		if _, err := s.kc.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("mark the pod before removing its member: %w", err)
		}
		return s.removeMember(ctx, r, d.MemberID)
	case plan.StewardRetainPV, plan.StewardDeletePVC:
		// The claim the decision names, as judged: the PV it was bound to
		// then, the claim's UID now (a successor is never deleted).
		i := slices.IndexFunc(in.Claims, func(c plan.StewardClaim) bool { return c.PVC == d.Claim })
		if d.Claim == "" || i < 0 {
			return fmt.Errorf("%s: claim %q is not one the steward judged", d.Action, d.Claim)
		}
		c := in.Claims[i]
		if d.Action == plan.StewardRetainPV {
			patch := []byte(`{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`)
			_, err := s.kc.CoreV1().PersistentVolumes().Patch(ctx, c.PV, types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		}
		pvc, err := s.kc.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, c.PVC, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pvc.Spec.VolumeName != c.PV {
			return fmt.Errorf("claim %s is bound to %q now, not PV %s on %s: not deleted", c.PVC, pvc.Spec.VolumeName, c.PV, p.Spec.NodeName)
		}
		uid := pvc.UID
		return s.kc.CoreV1().PersistentVolumeClaims(p.Namespace).Delete(ctx, pvc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	case plan.StewardForceDeletePod:
		zero, uid := int64(0), p.UID
		return s.kc.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	return fmt.Errorf("not a steward step: %s", d.Action)
}

// removeMember removes id through the members that serve.
func (s *Steward) removeMember(ctx context.Context, r memberstate.Result, id uint64) error {
	var eps []string
	for _, m := range r.Observation.Members {
		if m.Serving && m.ID != id {
			eps = append(eps, m.ClientURLs...)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 3 * time.Second, TLS: s.tls, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.MemberRemove(ctx, id); err != nil {
		// Applied by an earlier attempt whose answer was lost: the next
		// look sees it gone.
		return fmt.Errorf("remove member %x: %w", id, err)
	}
	return nil
}

func (s *Steward) event(p *corev1.Pod, eventType, reason, format string, args ...any) {
	rep := nodereport.NewPodReporter(s.kc, p.Namespace, p.Name, s.c.NodeName, "etcd-agent", s.log)
	rep.Eventf(eventType, reason, format, args...)
	rep.Shutdown()
}

// pvOnNode: the PV's node affinity pins it to the node: a term whose In
// expressions all hold for the Node's labels (any topology key, e.g. a CSI
// LVM driver's), or, with the Node gone, names it by hostname.
func pvOnNode(pv *corev1.PersistentVolume, nodeName string, node *corev1.Node) bool {
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil {
		return false
	}
	labels := map[string]string{corev1.LabelHostname: nodeName}
	if node != nil {
		labels = node.Labels
	}
	for _, term := range a.Required.NodeSelectorTerms {
		ok := len(term.MatchExpressions) > 0
		for _, e := range term.MatchExpressions {
			v, has := labels[e.Key]
			if e.Operator != corev1.NodeSelectorOpIn || !has || !slices.Contains(e.Values, v) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// memberByPeerURL finds the listed member with one of peerURLs.
func memberByPeerURL(r memberstate.Result, peerURLs []string) (observation.Member, bool) {
	for _, m := range r.Observation.Members {
		for _, u := range m.PeerURLs {
			if slices.Contains(peerURLs, u) {
				return m, true
			}
		}
	}
	return observation.Member{}, false
}
