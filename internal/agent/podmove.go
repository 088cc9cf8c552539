package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/podfacts"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// podClaims is heal.ClaimMover for a pod member (a StatefulSet member's
// move, plan.ActionMoveAway): it reads the target Node, the member's claim,
// PVs and pod, and takes the API steps the healer decided, each with a
// precondition on what it read.
type podClaims struct {
	kc        kubernetes.Interface
	node      string
	cur       func() membersource.PodMember
	ungated   func() error // the pod runtime's own check (stoppable)
	openStore func(ctx context.Context) (*snapshotstore.Store, error)
}

var _ heal.ClaimMover = podClaims{}

func (p podClaims) Facts(ctx context.Context, target string, j journal.Record, checkStore bool) plan.ClaimFacts {
	f := plan.ClaimFacts{Node: p.node, Target: target}
	if err := p.read(ctx, &f, j, checkStore); err != nil {
		f.Err = err.Error()
	}
	return f
}

func (p podClaims) read(ctx context.Context, f *plan.ClaimFacts, j journal.Record, checkStore bool) error {
	pm := p.cur()
	// Once begun, the move is about the claim and PV it began with: the
	// pod's successors (a new claim) are not this move's.
	f.ClaimUID, f.PV = string(pm.PVCUID), pm.PV
	if j.MoveClaimUID != "" {
		f.ClaimUID, f.PV = j.MoveClaimUID, j.MovePV
	}
	if pm.PVC == "" || f.PV == "" {
		return fmt.Errorf("pod %s has no claim: only a member on a PVC moves", pm.Key)
	}
	pod, err := p.kc.CoreV1().Pods(pm.Namespace).Get(ctx, pm.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		pod = nil
		f.NotMovable = "pod " + pm.Key + " is not there"
	case err != nil:
		return err
	}
	var template *corev1.Pod // the pod as its StatefulSet re-creates it
	if pod != nil {
		if template, err = p.statefulSetPod(ctx, pod, pm, f); err != nil {
			return err
		}
	}
	pvc, err := p.kc.CoreV1().PersistentVolumeClaims(pm.Namespace).Get(ctx, pm.PVC, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		pvc = nil
	case err != nil:
		return err
	case string(pvc.UID) != f.ClaimUID:
		pvc = nil // a successor: not the claim this move is about
	}
	if pvc != nil && pvc.DeletionTimestamp == nil && pod == nil && j.Active() {
		// Between the held pod's deletion (the stop) and its re-creation:
		// the target cannot be judged against it until it is back.
		return fmt.Errorf("pod %s is being re-created on its claim", pm.Key)
	}
	var node *corev1.Node
	if f.Target != "" && f.Target != p.node {
		n, err := p.kc.CoreV1().Nodes().Get(ctx, f.Target, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return err
		default:
			node, f.TargetFound, f.TargetReady = n, true, podfacts.NodeReady(n)
			if template != nil {
				f.TargetUnschedulable = unschedulable(template, n)
			}
		}
	}
	if node != nil {
		pods, err := p.kc.CoreV1().Pods(pm.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + f.Target})
		if err != nil {
			return err
		}
		for _, o := range pods.Items {
			if o.Spec.NodeName == f.Target && membersource.ClusterOf(&o) == pm.Cluster && o.DeletionTimestamp == nil {
				f.TargetHasMember = o.Namespace + "/" + o.Name
			}
		}
	}
	if err := p.ungated(); err != nil {
		f.Ungated = err.Error()
	}
	if pvc != nil {
		f.ClaimBound, f.ClaimDeleting = pvc.Spec.VolumeName == f.PV, pvc.DeletionTimestamp != nil
	}
	old, err := p.kc.CoreV1().PersistentVolumes().Get(ctx, f.PV, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the member's PV %s: %w", f.PV, err)
	}
	f.OldPVRetained = old.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain
	pvs, err := p.kc.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	slices.SortFunc(pvs.Items, func(a, b corev1.PersistentVolume) int { return strings.Compare(a.Name, b.Name) })
	for i := range pvs.Items {
		pv := &pvs.Items[i]
		if reservedFor(pv, pm, f.ClaimUID, j) {
			f.ReservedPV = pv.Name
		}
		if f.FreePV == "" && node != nil && pvc != nil && freeFor(pv, pvc, f.Target) {
			if why := unusableOn(pv, node); why != "" {
				f.PVUnusable = strings.TrimPrefix(f.PVUnusable+"; ", "; ") + "PV " + pv.Name + ": " + why
				continue
			}
			f.FreePV = pv.Name
		}
	}
	// The held pod is the one on the old claim: once that claim is gone, a
	// pod of that name here is a successor, never this move's to delete.
	f.PodOnNode = pod != nil && pod.Spec.NodeName == p.node && pvc != nil
	if pod != nil {
		f.PodNode = pod.Spec.NodeName
	}
	if template != nil && node != nil && pod.Spec.NodeName == p.node {
		// Judged while the member's pod is here, before it is released.
		if err := p.fitOnTarget(ctx, f, template, node); err != nil {
			return err
		}
	}
	f.TargetAnswer = targetAnswer(pod, pm, p.node, f.Target)
	if checkStore {
		f.StoreError = p.checkStore(ctx)
	}
	return nil
}

// statefulSetPod checks that a StatefulSet re-creates pod with its claim
// (f.NotMovable says why not) and returns the pod as its template would
// re-create it, and the replica count.
func (p podClaims) statefulSetPod(ctx context.Context, pod *corev1.Pod, pm membersource.PodMember, f *plan.ClaimFacts) (*corev1.Pod, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.Kind != "StatefulSet" {
		f.NotMovable = fmt.Sprintf("pod %s is not a StatefulSet's: nothing would re-create it, or its claim, on the target", pm.Key)
		return nil, nil
	}
	sts, err := p.kc.AppsV1().StatefulSets(pod.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the pod's StatefulSet %s: %w", owner.Name, err)
	}
	f.Replicas = 1
	if sts.Spec.Replicas != nil {
		f.Replicas = int(*sts.Spec.Replicas)
	}
	if !slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(c corev1.PersistentVolumeClaim) bool { return c.Name+"-"+pod.Name == pm.PVC }) {
		f.NotMovable = fmt.Sprintf("claim %s is not one of StatefulSet %s's claim templates: nothing would re-create it on the target", pm.PVC, sts.Name)
	}
	for _, v := range pod.Spec.Volumes {
		if c := v.PersistentVolumeClaim; c != nil && c.ClaimName != pm.PVC {
			// Only the data dir's claim is re-homed: another one (a WAL
			// disk) would keep the pod pinned to this node.
			f.NotMovable = fmt.Sprintf("pod %s has another claim (%s) besides its data dir's: only a member on one claim moves", pm.Key, c.ClaimName)
		}
	}
	if sts.DeletionTimestamp != nil {
		f.NotMovable = fmt.Sprintf("StatefulSet %s is being deleted", sts.Name)
	}
	return podfacts.FromTemplate(pod, sts), nil
}

// unschedulable says why the scheduler would not put pod on node ("" it
// would, as far as the node goes: cordon, taints, selector, affinity).
func unschedulable(pod *corev1.Pod, node *corev1.Node) string {
	if node.Spec.Unschedulable {
		return "node " + node.Name + " is cordoned"
	}
	noSchedule := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	if t, ok := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, noSchedule, false); ok {
		return fmt.Sprintf("taint %s=%s:%s is not tolerated", t.Key, t.Value, t.Effect)
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return fmt.Sprintf("its node selector or required node affinity does not match node %s (%v)", node.Name, err)
	}
	return ""
}

// reservedFor: pv is pre-bound to the member's claim name by this move
// (its move-seed names the recovery), not yet bound to a claim other than
// a successor of the old one.
func reservedFor(pv *corev1.PersistentVolume, pm membersource.PodMember, oldClaim string, j journal.Record) bool {
	r := pv.Spec.ClaimRef
	if j.ID == "" || r == nil || r.Namespace != pm.Namespace || r.Name != pm.PVC || string(r.UID) == oldClaim {
		return false
	}
	s, _, _, err := nodereport.ParseMoveSeed(pv.Annotations[nodereport.AnnotationMoveSeed])
	return err == nil && s.Recovery == j.ID
}

// freeFor: pv can bind claim, and only on the target: Available, unclaimed,
// pinned to the target alone by hostname, the claim's class (none for
// none), selector and attributes class, at least its size, its access
// modes and volume mode.
func freeFor(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim, target string) bool {
	if pv.DeletionTimestamp != nil || pv.Spec.ClaimRef != nil || pv.Status.Phase != corev1.VolumeAvailable || !pvOnlyOn(pv, target) {
		return false
	}
	if class := claim.Spec.StorageClassName; pv.Spec.StorageClassName != ptrValue(class) {
		return false
	}
	if ptrValue(claim.Spec.VolumeAttributesClassName) != ptrValue(pv.Spec.VolumeAttributesClassName) {
		return false
	}
	if claim.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pv.Labels)) {
			return false
		}
	}
	want, have := claim.Spec.Resources.Requests[corev1.ResourceStorage], pv.Spec.Capacity[corev1.ResourceStorage]
	if have.Cmp(want) < 0 {
		return false
	}
	for _, m := range claim.Spec.AccessModes {
		if !slices.Contains(pv.Spec.AccessModes, m) {
			return false
		}
	}
	mode := func(m *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
		if m == nil {
			return corev1.PersistentVolumeFilesystem
		}
		return *m
	}
	return mode(claim.Spec.VolumeMode) == mode(pv.Spec.VolumeMode)
}

// unusableOn says why pv, free on node by name, is no PV for the moved
// member there ("" it is): its node affinity, matched against the Node's
// labels as the scheduler does, must hold (a hostname label that is not
// the node's name fails it), and the target's agent must find its files (a
// local or hostPath path in the spec, or a CSI volume it reads per pod).
func unusableOn(pv *corev1.PersistentVolume, node *corev1.Node) string {
	if ok, err := nodeaffinity.NewLazyErrorNodeSelector(pv.Spec.NodeAffinity.Required).Match(node); err != nil || !ok {
		return fmt.Sprintf("its node affinity does not match node %s's labels (%v)", node.Name, err)
	}
	switch src := pv.Spec.PersistentVolumeSource; {
	case src.Local != nil && src.Local.Path != "", src.HostPath != nil && src.HostPath.Path != "", src.CSI != nil:
		return ""
	}
	return "no local or hostPath path in its spec (nor a CSI volume): the target's agent would not find its files"
}

// pvOnlyOn: every term of pv's node affinity pins it to node by hostname
// (a zone or a set of nodes would let the pod land elsewhere).
func pvOnlyOn(pv *corev1.PersistentVolume, node string) bool {
	a := pv.Spec.NodeAffinity
	if a == nil || a.Required == nil || len(a.Required.NodeSelectorTerms) == 0 {
		return false
	}
	for _, term := range a.Required.NodeSelectorTerms {
		if !slices.ContainsFunc(term.MatchExpressions, func(e corev1.NodeSelectorRequirement) bool {
			return e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && slices.Equal(e.Values, []string{node})
		}) {
			return false
		}
	}
	return true
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (p podClaims) checkStore(ctx context.Context) string {
	if p.openStore == nil {
		return ""
	}
	return snapshotstore.WhyNotAnswering(ctx, p.openStore)
}

func (p podClaims) Do(ctx context.Context, a plan.Action, j journal.Record, f plan.ClaimFacts) error {
	pm := p.cur()
	switch a {
	case plan.StewardRetainPV:
		patch := []byte(`{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`)
		_, err := p.kc.CoreV1().PersistentVolumes().Patch(ctx, f.PV, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	case plan.ReservePV:
		return p.reserve(ctx, pm, j, f)
	case plan.UnreservePV:
		return p.unreserve(ctx, pm, j, f)
	case plan.StewardDeletePVC:
		uid := types.UID(f.ClaimUID)
		return p.kc.CoreV1().PersistentVolumeClaims(pm.Namespace).Delete(ctx, pm.PVC, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	case plan.ReleasePod:
		pod, err := p.kc.CoreV1().Pods(pm.Namespace).Get(ctx, pm.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Spec.NodeName != p.node {
			return fmt.Errorf("pod %s is on node %q now, not %s: not ours to delete", pm.Key, pod.Spec.NodeName, p.node)
		}
		uid := pod.UID
		return p.kc.CoreV1().Pods(pm.Namespace).Delete(ctx, pm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	return fmt.Errorf("not a pod move step: %s", a)
}

// reserve pre-binds the free PV f.FreePV to the claim's name (no UID: the
// claim the StatefulSet creates next binds it, and only it) and names the
// stored snapshot on it; an update, so a PV claimed meanwhile is refused.
func (p podClaims) reserve(ctx context.Context, pm membersource.PodMember, j journal.Record, f plan.ClaimFacts) error {
	if j.StoreKey == "" || j.OldMemberID == 0 || f.ClusterID == 0 {
		return errors.New("the move's snapshot, member or cluster is not recorded: nothing to name on the PV")
	}
	pv, err := p.kc.CoreV1().PersistentVolumes().Get(ctx, f.FreePV, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pv.Spec.ClaimRef != nil || pv.Status.Phase != corev1.VolumeAvailable {
		return fmt.Errorf("PV %s is no longer free (%s, claim %v)", pv.Name, pv.Status.Phase, pv.Spec.ClaimRef)
	}
	seed := nodereport.MoveSeed{Recovery: j.ID, From: pm.Key + "@" + p.node, Key: j.StoreKey, SHA256: j.SnapshotSHA256, Size: j.SnapshotBytes,
		ClusterID: strconv.FormatUint(f.ClusterID, 16), Removed: strconv.FormatUint(uint64(j.OldMemberID), 16)}
	// A merge patch conditional on the version read: a PV claimed since is
	// refused (409), never taken over.
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": pv.ResourceVersion, "annotations": map[string]string{nodereport.AnnotationMoveSeed: seed.Encode()}},
		"spec":     map[string]any{"claimRef": map[string]string{"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": pm.Namespace, "name": pm.PVC}},
	})
	_, err = p.kc.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// unreserve takes this move's reservation back (claimRef and move-seed),
// only while no claim is bound to the PV, conditional on its version.
func (p podClaims) unreserve(ctx context.Context, pm membersource.PodMember, j journal.Record, f plan.ClaimFacts) error {
	pv, err := p.kc.CoreV1().PersistentVolumes().Get(ctx, f.ReservedPV, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !reservedFor(pv, pm, f.ClaimUID, j) || pv.Spec.ClaimRef.UID != "" {
		return fmt.Errorf("PV %s is not this move's unbound reservation any more (claim %v)", pv.Name, pv.Spec.ClaimRef)
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": pv.ResourceVersion, "annotations": map[string]any{nodereport.AnnotationMoveSeed: nil}},
		"spec":     map[string]any{"claimRef": nil},
	})
	_, err = p.kc.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// storeSeedOf reads a member's PV move-seed for its healer (nil: none, or
// unreadable: the learner is then seeded as any other).
func storeSeedOf(pm membersource.PodMember) (*heal.StoreSeed, error) {
	if pm.MoveSeed == "" {
		return nil, nil
	}
	s, cluster, removed, err := nodereport.ParseMoveSeed(pm.MoveSeed)
	if err != nil {
		return nil, err
	}
	return &heal.StoreSeed{Key: s.Key, SHA256: s.SHA256, Size: s.Size, ClusterID: cluster, Removed: removed, From: s.From}, nil
}
