package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/plan"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	podresource "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// What a pod move checks of its target besides the node itself (Ready,
// cordon, taints, selector and required affinity: unschedulable) and its
// PVs (freeFor, unusableOn), as the scheduler would judge the member's pod
// there: room for its requests, its host ports free, its required pod
// affinity and anti-affinity (podmove_podfit.go), and the template's
// topology spread.

// fitOnTarget fills f.TargetShort, f.TargetPortsTaken, f.TargetPodAffinity
// and f.TargetSpread for template (the pod as its StatefulSet re-creates
// it) on node: read only while the member's pod is still here (before the
// release), when the move is judged. Pod affinity is judged over every pod
// bound to a node (a zone's domain spans nodes, and any workload's
// anti-affinity may name the member's pod), so every pod is listed once,
// as the scheduler sees them; this is read only while a move is judged.
func (p podClaims) fitOnTarget(ctx context.Context, f *plan.ClaimFacts, template *corev1.Pod, node *corev1.Node) error {
	pods, err := p.kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("the pods (to judge %s): %w", node.Name, err)
	}
	nodes, err := p.kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("the nodes (to judge %s): %w", node.Name, err)
	}
	onTarget := slices.DeleteFunc(slices.Clone(pods.Items), func(o corev1.Pod) bool { return o.Spec.NodeName != node.Name })
	f.TargetShort = resourceShort(template, node, onTarget)
	f.TargetPortsTaken = hostPortsTaken(template, node.Name, onTarget)
	var nsLabels map[string]labels.Set
	if selectsNamespacesByLabel(template, pods.Items) {
		namespaces, err := p.kc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("the namespaces (pod affinity): %w", err)
		}
		nsLabels = map[string]labels.Set{}
		for _, ns := range namespaces.Items {
			nsLabels[ns.Name] = ns.Labels
		}
	}
	f.TargetPodAffinity = podAffinityBroken(template, node, nodes.Items, pods.Items, nsLabels)
	if len(doNotSchedule(template)) > 0 {
		f.TargetSpread = spreadBroken(template, node, nodes.Items, pods.Items)
	}
	return nil
}

// resourceShort says which of pod's requests node's allocatable, less what
// the pods bound to it request, does not cover, and whether it has a pod
// slot left ("" it fits): the scheduler's resource fit (NodeResourcesFit's
// filter) as far as requests go. Each pod's requests are component-helpers'
// (resource.PodRequests: init and sidecar containers, overhead, pod-level
// resources); component-helpers has no fit check (it is in
// k8s.io/kubernetes's scheduler), so the sum and the comparison are here.
// Pods that finished (Succeeded, Failed) hold nothing; pods being deleted
// still do, as for the scheduler.
func resourceShort(pod *corev1.Pod, node *corev1.Node, onNode []corev1.Pod) string {
	used := corev1.ResourceList{}
	count := 0
	for i := range onNode {
		o := &onNode[i]
		if o.Spec.NodeName != node.Name || o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed || o.UID == pod.UID {
			continue
		}
		count++
		for name, q := range podresource.PodRequests(o, podresource.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	alloc := node.Status.Allocatable
	var short []string
	if slots, ok := alloc[corev1.ResourcePods]; ok && int64(count+1) > slots.Value() {
		short = append(short, fmt.Sprintf("pods: %d bound there, %s allowed", count, slots.String()))
	}
	want := podresource.PodRequests(pod, podresource.PodResourcesOptions{})
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, string(name))
	}
	slices.Sort(names)
	for _, n := range names {
		name := corev1.ResourceName(n)
		w := want[name]
		if w.IsZero() {
			continue
		}
		free := alloc[name].DeepCopy()
		free.Sub(used[name])
		if free.Cmp(w) < 0 {
			u := used[name]
			a := alloc[name]
			short = append(short, fmt.Sprintf("%s: requests %s, allocatable %s of which %s requested by the pods there", name, w.String(), a.String(), u.String()))
		}
	}
	return strings.Join(short, "; ")
}

// doNotSchedule is pod's hard topology spread constraints.
func doNotSchedule(pod *corev1.Pod) []corev1.TopologySpreadConstraint {
	var out []corev1.TopologySpreadConstraint
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == corev1.DoNotSchedule {
			out = append(out, c)
		}
	}
	return out
}

// spreadBroken says which DoNotSchedule topology spread constraint of pod
// the pod on target breaks ("" none), counted as the scheduler's
// PodTopologySpread filter counts it, once the member's own pod (of pod's
// name) is gone from where it is: the pods of pod's namespace that match
// the constraint's selector (and matchLabelKeys), bound to eligible nodes
// (every constraint's topology label; the pod's node selector and required
// affinity unless nodeAffinityPolicy is Ignore; untolerated taints only if
// nodeTaintsPolicy is Honor), not being deleted. The target's domain, with
// the pod, may have at most maxSkew more than the emptiest eligible domain
// (0 while there are fewer domains than minDomains).
func spreadBroken(pod *corev1.Pod, target *corev1.Node, nodes []corev1.Node, pods []corev1.Pod) string {
	hard := doNotSchedule(pod)
	for _, c := range hard {
		if _, ok := target.Labels[c.TopologyKey]; !ok {
			return fmt.Sprintf("node %s has no label %s (a DoNotSchedule topology spread constraint's key)", target.Name, c.TopologyKey)
		}
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	hasKeys := func(n *corev1.Node) bool {
		return !slices.ContainsFunc(hard, func(c corev1.TopologySpreadConstraint) bool { _, ok := n.Labels[c.TopologyKey]; return !ok })
	}
	for _, c := range hard {
		sel, err := spreadSelector(c, pod)
		if err != nil {
			return fmt.Sprintf("constraint on %s: its selector: %v", c.TopologyKey, err)
		}
		// Every eligible node's domain counts, empty or not; the target's
		// too (whether the pod may go there at all is unschedulable's).
		domainOf := map[string]string{target.Name: target.Labels[c.TopologyKey]}
		counts := map[string]int{target.Labels[c.TopologyKey]: 0}
		for i := range nodes {
			if n := &nodes[i]; hasKeys(n) && spreadEligible(c, pod, n, affinity) {
				domainOf[n.Name] = n.Labels[c.TopologyKey]
				counts[n.Labels[c.TopologyKey]] += 0
			}
		}
		for i := range pods {
			o := &pods[i]
			d, ok := domainOf[o.Spec.NodeName]
			if ok && o.Namespace == pod.Namespace && o.Name != pod.Name && o.DeletionTimestamp == nil && sel.Matches(labels.Set(o.Labels)) {
				counts[d]++
			}
		}
		least := -1
		for _, k := range counts {
			if least < 0 || k < least {
				least = k
			}
		}
		if c.MinDomains != nil && len(counts) < int(*c.MinDomains) {
			least = 0
		}
		self := 0
		if sel.Matches(labels.Set(pod.Labels)) {
			self = 1
		}
		domain := target.Labels[c.TopologyKey]
		if skew := counts[domain] + self - least; skew > int(c.MaxSkew) {
			return fmt.Sprintf("%s=%s would have %d matching pods, the emptiest domain %d: skew %d > maxSkew %d", c.TopologyKey, domain, counts[domain]+self, least, skew, c.MaxSkew)
		}
	}
	return ""
}

// spreadEligible: node counts for constraint c of pod (its policies).
func spreadEligible(c corev1.TopologySpreadConstraint, pod *corev1.Pod, n *corev1.Node, affinity nodeaffinity.RequiredNodeAffinity) bool {
	if c.NodeAffinityPolicy == nil || *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor {
		if ok, err := affinity.Match(n); err != nil || !ok {
			return false
		}
	}
	if c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor {
		noSchedule := func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
		}
		if _, bad := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, pod.Spec.Tolerations, noSchedule, false); bad {
			return false
		}
	}
	return true
}

// spreadSelector is c's label selector with its matchLabelKeys (the pod's
// values of those keys) added.
func spreadSelector(c corev1.TopologySpreadConstraint, pod *corev1.Pod) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
	if err != nil {
		return nil, err
	}
	for _, k := range c.MatchLabelKeys {
		if v, ok := pod.Labels[k]; ok {
			r, err := labels.NewRequirement(k, selection.Equals, []string{v})
			if err != nil {
				return nil, err
			}
			sel = sel.Add(*r)
		}
	}
	return sel, nil
}
