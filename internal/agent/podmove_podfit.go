package agent

import (
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// What a pod move checks of the pods around its target, as the scheduler
// would judge the member's pod there: its host ports free on the target
// (NodePorts) and its required inter-pod affinity and anti-affinity, and
// the other pods' anti-affinity against it (InterPodAffinity).
// component-helpers has neither check (both are in k8s.io/kubernetes's
// scheduler plugins); the selectors are apimachinery's.

// hostPort is one host port a pod binds: ip "" is every IP.
type hostPort struct {
	ip       string
	protocol corev1.Protocol
	port     int32
}

func (h hostPort) String() string {
	ip := h.ip
	if ip == "" {
		ip = "every IP"
	}
	return fmt.Sprintf("%d/%s on %s", h.port, h.protocol, ip)
}

// overlaps: h and o cannot both be bound on one node.
func (h hostPort) overlaps(o hostPort) bool {
	return h.port == o.port && h.protocol == o.protocol && (h.ip == "" || o.ip == "" || h.ip == o.ip)
}

// hostPortsOf is the host ports pod binds: its containers' and its
// sidecars' (restartable init containers, which run as long as it does),
// each port with a hostPort, and on a hostNetwork pod every container port
// (the API defaults hostPort to it; a StatefulSet's template may not show
// it). An unset protocol is TCP; an unset or unspecified IP every IP.
func hostPortsOf(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(c corev1.Container) {
		for _, p := range c.Ports {
			port := p.HostPort
			if port == 0 && pod.Spec.HostNetwork {
				port = p.ContainerPort
			}
			if port <= 0 {
				continue
			}
			h := hostPort{ip: p.HostIP, protocol: p.Protocol, port: port}
			if ip := net.ParseIP(h.ip); ip != nil && ip.IsUnspecified() {
				h.ip = ""
			}
			if h.protocol == "" {
				h.protocol = corev1.ProtocolTCP
			}
			out = append(out, h)
		}
	}
	for _, c := range pod.Spec.Containers {
		add(c)
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	return out
}

// hostPortsTaken says which of pod's host ports a pod bound to node
// already binds ("" none): the scheduler's NodePorts filter. Pods that
// finished bind nothing; pods being deleted still do.
func hostPortsTaken(pod *corev1.Pod, node string, onNode []corev1.Pod) string {
	want := hostPortsOf(pod)
	if len(want) == 0 {
		return ""
	}
	var taken []string
	for i := range onNode {
		o := &onNode[i]
		if o.Spec.NodeName != node || finished(o) || samePod(o, pod) {
			continue
		}
		for _, h := range hostPortsOf(o) {
			for _, w := range want {
				if w.overlaps(h) {
					taken = append(taken, fmt.Sprintf("%s by %s/%s (%s)", w, o.Namespace, o.Name, h))
				}
			}
		}
	}
	return strings.Join(taken, "; ")
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// samePod: o is pod, or the pod of its name its move replaces.
func samePod(o, pod *corev1.Pod) bool {
	return (o.UID != "" && o.UID == pod.UID) || (o.Namespace == pod.Namespace && o.Name == pod.Name)
}

// affinityTerm is a required pod (anti-)affinity term as the scheduler
// reads it: the pods it selects are in its namespaces (the owner's when it
// lists none and has no namespace selector) or in a namespace its
// namespace selector picks, and match its label selector, with its
// matchLabelKeys and mismatchLabelKeys read against the owner's labels (as
// the API server merges them when it creates the pod). A missing selector
// selects nothing.
type affinityTerm struct {
	text        string // for the fact
	owner       *corev1.Pod
	topologyKey string
	namespaces  []string
	nsSelector  labels.Selector
	selector    labels.Selector
}

func newAffinityTerm(owner *corev1.Pod, t corev1.PodAffinityTerm) (affinityTerm, error) {
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	if err != nil {
		return affinityTerm{}, err
	}
	for _, k := range t.MatchLabelKeys {
		if v, ok := owner.Labels[k]; ok && t.LabelSelector != nil {
			r, err := labels.NewRequirement(k, selection.In, []string{v})
			if err != nil {
				return affinityTerm{}, err
			}
			sel = sel.Add(*r)
		}
	}
	for _, k := range t.MismatchLabelKeys {
		if v, ok := owner.Labels[k]; ok && t.LabelSelector != nil {
			r, err := labels.NewRequirement(k, selection.NotIn, []string{v})
			if err != nil {
				return affinityTerm{}, err
			}
			sel = sel.Add(*r)
		}
	}
	nsSel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
	if err != nil {
		return affinityTerm{}, err
	}
	ns := t.Namespaces
	if len(ns) == 0 && t.NamespaceSelector == nil {
		ns = []string{owner.Namespace}
	}
	return affinityTerm{text: fmt.Sprintf("topologyKey %s, pods %s", t.TopologyKey, sel), owner: owner,
		topologyKey: t.TopologyKey, namespaces: ns, nsSelector: nsSel, selector: sel}, nil
}

// selects: the term selects pod (nsLabels: each namespace's labels).
func (t affinityTerm) selects(pod *corev1.Pod, nsLabels map[string]labels.Set) bool {
	if !slices.Contains(t.namespaces, pod.Namespace) && !t.nsSelector.Matches(nsLabels[pod.Namespace]) {
		return false
	}
	return t.selector.Matches(labels.Set(pod.Labels))
}

// requiredTerms is pod's required affinity and anti-affinity terms.
func requiredTerms(pod *corev1.Pod) (affinity, anti []corev1.PodAffinityTerm) {
	if a := pod.Spec.Affinity; a != nil {
		if a.PodAffinity != nil {
			affinity = a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		}
		if a.PodAntiAffinity != nil {
			anti = a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		}
	}
	return affinity, anti
}

// selectsNamespacesByLabel: a required term of pod, or of one of pods,
// picks namespaces by label (their labels must then be read).
func selectsNamespacesByLabel(pod *corev1.Pod, pods []corev1.Pod) bool {
	bySelector := func(p *corev1.Pod, withAffinity bool) bool {
		affinity, anti := requiredTerms(p)
		if !withAffinity {
			affinity = nil
		}
		return slices.ContainsFunc(slices.Concat(affinity, anti), func(t corev1.PodAffinityTerm) bool { return t.NamespaceSelector != nil })
	}
	if bySelector(pod, true) {
		return true
	}
	return slices.ContainsFunc(pods, func(o corev1.Pod) bool { return bySelector(&o, false) })
}

// podAffinityBroken says which required inter-pod affinity or
// anti-affinity pod breaks on target ("" none), as the scheduler's
// InterPodAffinity filter judges it over the pods bound to the nodes it
// knows (finished pods not; the member's own pod, of pod's name, not: it
// leaves its node): no pod in target's domain of a term's topology key may
// have a required anti-affinity term selecting pod (symmetry); no pod
// there may be selected by one of pod's anti-affinity terms (a target
// without the key keeps the term); and some pod there must be selected by
// all of pod's affinity terms, for each term's key (the target must have
// every key), unless no pod anywhere is and pod selects itself: the first
// pod of a group.
func podAffinityBroken(pod *corev1.Pod, target *corev1.Node, nodes []corev1.Node, pods []corev1.Pod, nsLabels map[string]labels.Set) string {
	nodeLabels := map[string]map[string]string{target.Name: target.Labels}
	for i := range nodes {
		nodeLabels[nodes[i].Name] = nodes[i].Labels
	}
	// sameDomain: o's node and the target share key's value.
	sameDomain := func(o *corev1.Pod, key string) bool {
		v, ok := target.Labels[key]
		w, known := nodeLabels[o.Spec.NodeName][key]
		return ok && known && v == w
	}
	var others []*corev1.Pod
	for i := range pods {
		o := &pods[i]
		if _, known := nodeLabels[o.Spec.NodeName]; known && o.Spec.NodeName != "" && !finished(o) && !samePod(o, pod) {
			others = append(others, o)
		}
	}
	for _, o := range others {
		_, anti := requiredTerms(o)
		for _, at := range anti {
			t, err := newAffinityTerm(o, at)
			if err != nil {
				continue // the API validates terms; one it could not read selects nothing
			}
			if t.selects(pod, nsLabels) && sameDomain(o, t.topologyKey) {
				return fmt.Sprintf("pod %s/%s on node %s has a required anti-affinity against the member's pod (%s)", o.Namespace, o.Name, o.Spec.NodeName, t.text)
			}
		}
	}
	affinity, anti := requiredTerms(pod)
	for _, at := range anti {
		t, err := newAffinityTerm(pod, at)
		if err != nil {
			return "a required anti-affinity term: " + err.Error()
		}
		for _, o := range others {
			if t.selects(o, nsLabels) && sameDomain(o, t.topologyKey) {
				return fmt.Sprintf("its required anti-affinity (%s) selects pod %s/%s on node %s", t.text, o.Namespace, o.Name, o.Spec.NodeName)
			}
		}
	}
	if len(affinity) == 0 {
		return ""
	}
	terms := make([]affinityTerm, 0, len(affinity))
	for _, at := range affinity {
		t, err := newAffinityTerm(pod, at)
		if err != nil {
			return "a required affinity term: " + err.Error()
		}
		if _, ok := target.Labels[t.topologyKey]; !ok {
			return fmt.Sprintf("node %s has no label %s (a required pod affinity term's key)", target.Name, t.topologyKey)
		}
		terms = append(terms, t)
	}
	selectsAll := func(p *corev1.Pod) bool {
		return !slices.ContainsFunc(terms, func(t affinityTerm) bool { return !t.selects(p, nsLabels) })
	}
	// The first of a group: no pod anywhere (on a node with a term's key)
	// is selected by every term, and pod is.
	first := selectsAll(pod) && !slices.ContainsFunc(others, func(o *corev1.Pod) bool {
		return selectsAll(o) && slices.ContainsFunc(terms, func(t affinityTerm) bool { _, ok := nodeLabels[o.Spec.NodeName][t.topologyKey]; return ok })
	})
	for _, t := range terms {
		met := slices.ContainsFunc(others, func(o *corev1.Pod) bool { return selectsAll(o) && sameDomain(o, t.topologyKey) })
		if !met && !first {
			return fmt.Sprintf("no pod in %s=%s meets its required affinity (%s)", t.topologyKey, target.Labels[t.topologyKey], t.text)
		}
	}
	return ""
}
