package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ports gives a pod's first container these ports.
func ports(ps ...corev1.ContainerPort) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Ports = ps }
}

func hostNetwork(p *corev1.Pod) { p.Spec.HostNetwork = true }

// etcdPorts is a member's client and peer ports, container ports only.
var etcdPorts = []corev1.ContainerPort{{Name: "client", ContainerPort: 2379}, {Name: "peer", ContainerPort: 2380}}

// From issue 38: the scheduler's NodePorts filter. A hostNetwork member
// (as kubeadm-like StatefulSets run it) takes every container port as a
// host port, so a pod on the target already bound to one of them, for the
// same protocol and an overlapping IP (an unset IP is every IP), keeps the
// member's pod off the target; the move is refused before any change.
func TestAPodMoveSeesAHostPortTakenOnTheTarget(t *testing.T) {
	ctx := context.Background()
	sidecar := func(p *corev1.Pod) {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{ContainerPort: 2379, HostPort: 2379}}}}
	}
	hostNetEtcd := corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "etcd", Ports: etcdPorts}}}
	podNetEtcd := corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Ports: etcdPorts}}}
	onIP := corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Ports: []corev1.ContainerPort{{ContainerPort: 2379, HostPort: 12379, HostIP: "10.0.0.9"}}}}}
	for _, c := range []struct {
		name     string
		template corev1.PodSpec
		other    *corev1.Pod
		taken    string // "" free; else a part of the fact
	}{
		{"a pod there binds 2379 on every IP", hostNetEtcd, podOn("other", "proxy", "node9", nil, nil, ports(corev1.ContainerPort{ContainerPort: 8080, HostPort: 2379})), "2379/TCP"},
		{"a hostNetwork pod there listens on 2380", hostNetEtcd, podOn("other", "peer", "node9", nil, nil, hostNetwork, ports(corev1.ContainerPort{ContainerPort: 2380})), "other/peer"},
		{"a pod there binds 2379 on one IP", hostNetEtcd, podOn("other", "proxy", "node9", nil, nil, ports(corev1.ContainerPort{ContainerPort: 2379, HostPort: 2379, HostIP: "10.0.0.8"})), "2379"},
		{"a sidecar there binds 2379", hostNetEtcd, podOn("other", "proxy", "node9", nil, nil, sidecar), "2379"},
		{"the same port, UDP", hostNetEtcd, podOn("other", "dns", "node9", nil, nil, ports(corev1.ContainerPort{ContainerPort: 2379, HostPort: 2379, Protocol: corev1.ProtocolUDP})), ""},
		{"the port taken on another node", hostNetEtcd, podOn("other", "proxy", "node5", nil, nil, ports(corev1.ContainerPort{ContainerPort: 2379, HostPort: 2379})), ""},
		{"by a pod that finished", hostNetEtcd, podOn("other", "proxy", "node9", nil, nil, ports(corev1.ContainerPort{ContainerPort: 2379, HostPort: 2379}),
			func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), ""},
		{"a container port is no host port off hostNetwork", podNetEtcd, podOn("other", "proxy", "node9", nil, nil, ports(corev1.ContainerPort{ContainerPort: 2379, HostPort: 2379})), ""},
		{"its host port on its IP, another IP there", onIP, podOn("other", "proxy", "node9", nil, nil, ports(corev1.ContainerPort{ContainerPort: 1, HostPort: 12379, HostIP: "10.0.0.8"})), ""},
		{"its host port on its IP, every IP there", onIP, podOn("other", "proxy", "node9", nil, nil, ports(corev1.ContainerPort{ContainerPort: 1, HostPort: 12379})), "12379/TCP"},
	} {
		kc, pc := podMoveWorld(localPV("f-good", "node9", "local", "1Gi"), c.other)
		withTemplate(t, kc, c.template)
		f := pc.Facts(ctx, "node9", journal.Record{}, false)
		if f.Err != "" || (c.taken == "") != (f.TargetPortsTaken == "") || !strings.Contains(f.TargetPortsTaken, c.taken) {
			t.Errorf("%s: ports taken %q (err %q), want %q", c.name, f.TargetPortsTaken, f.Err, c.taken)
		}
	}
}

// term is a required pod affinity term on key selecting labels sel.
func term(key string, sel map[string]string, mods ...func(*corev1.PodAffinityTerm)) corev1.PodAffinityTerm {
	t := corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: sel}}
	for _, m := range mods {
		m(&t)
	}
	return t
}

func antiAffinity(ts ...corev1.PodAffinityTerm) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ts}}
}

func podAffinity(ts ...corev1.PodAffinityTerm) *corev1.Affinity {
	return &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ts}}
}

func withAffinity(a *corev1.Affinity) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Affinity = a }
}

// From issue 38: the scheduler's InterPodAffinity filter, against every
// workload, not only the member's cluster: the template's required
// anti-affinity must name no pod in the target's topology domain, each of
// its required affinity terms must be met there (unless no pod anywhere
// meets them and the pod meets them itself: the first of a group), and no
// pod in the target's domain may have a required anti-affinity naming the
// member pod (symmetry). Namespaces as the scheduler reads a term: its own
// namespace by default, the listed ones, those its namespace selector
// picks.
func TestAPodMoveSeesWhetherTheTargetKeepsRequiredPodAffinity(t *testing.T) {
	ctx := context.Background()
	db := map[string]string{"app": "db"}
	ours := map[string]string{membersource.ClusterLabel: "a"}
	zone := corev1.LabelTopologyZone
	host := corev1.LabelHostname
	node := func(name, z string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{host: name, zone: z}}}
	}
	prod := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"env": "prod"}}}
	allNamespaces := func(t *corev1.PodAffinityTerm) { t.NamespaceSelector = &metav1.LabelSelector{} }
	prodNamespaces := func(t *corev1.PodAffinityTerm) {
		t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	}
	listed := func(ns ...string) func(*corev1.PodAffinityTerm) {
		return func(t *corev1.PodAffinityTerm) { t.Namespaces = ns }
	}
	for _, c := range []struct {
		name       string
		affinity   *corev1.Affinity // the template's
		pods       []runtime.Object
		targetZone string // "" none
		broken     string // "" kept; else a part of the fact
	}{
		// The template's anti-affinity.
		{"anti-affinity: a db pod of its namespace on the target", antiAffinity(term(host, db)),
			[]runtime.Object{podOn("ns", "db-0", "node9", db, nil)}, "zb", "ns/db-0"},
		{"anti-affinity: a db pod of another namespace (not the term's)", antiAffinity(term(host, db)),
			[]runtime.Object{podOn("other", "db-0", "node9", db, nil)}, "zb", ""},
		{"anti-affinity: every namespace by an empty selector", antiAffinity(term(host, db, allNamespaces)),
			[]runtime.Object{podOn("other", "db-0", "node9", db, nil)}, "zb", "other/db-0"},
		{"anti-affinity: namespaces by label", antiAffinity(term(host, db, prodNamespaces)),
			[]runtime.Object{prod, podOn("other", "db-0", "node9", db, nil)}, "zb", "other/db-0"},
		{"anti-affinity: namespaces listed", antiAffinity(term(host, db, listed("other"))),
			[]runtime.Object{podOn("other", "db-0", "node9", db, nil)}, "zb", "other/db-0"},
		{"anti-affinity by zone: a db pod in the target's zone", antiAffinity(term(zone, db)),
			[]runtime.Object{podOn("ns", "db-0", "node2", db, nil)}, "zb", "ns/db-0"},
		{"anti-affinity by zone: the db pod in another zone", antiAffinity(term(zone, db)),
			[]runtime.Object{podOn("ns", "db-0", "node3", db, nil)}, "zb", ""},
		{"anti-affinity by zone: the target has no zone", antiAffinity(term(zone, db)),
			[]runtime.Object{podOn("ns", "db-0", "node2", db, nil)}, "", ""},
		{"anti-affinity: the db pod finished", antiAffinity(term(host, db)),
			[]runtime.Object{podOn("ns", "db-0", "node9", db, nil, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })}, "zb", ""},
		// The template's affinity.
		{"affinity: a cache pod in the target's zone", podAffinity(term(zone, map[string]string{"app": "cache"})),
			[]runtime.Object{podOn("ns", "cache-0", "node2", map[string]string{"app": "cache"}, nil)}, "zb", ""},
		{"affinity: the cache pod in another zone only", podAffinity(term(zone, map[string]string{"app": "cache"})),
			[]runtime.Object{podOn("ns", "cache-0", "node3", map[string]string{"app": "cache"}, nil)}, "zb", "app=cache"},
		{"affinity: no cache pod anywhere", podAffinity(term(zone, map[string]string{"app": "cache"})), nil, "zb", "app=cache"},
		{"affinity: the target has no zone", podAffinity(term(zone, map[string]string{"app": "cache"})),
			[]runtime.Object{podOn("ns", "cache-0", "node2", map[string]string{"app": "cache"}, nil)}, "", "no label"},
		{"affinity to its own kind, none anywhere: the first of a group", podAffinity(term(zone, ours)), nil, "zb", ""},
		{"affinity to its own kind, one in another zone", podAffinity(term(zone, ours)),
			[]runtime.Object{podOn("ns", "etcd-0", "node3", ours, nil)}, "zb", "topology.kubernetes.io/zone"},
		// Symmetry: a pod there whose anti-affinity names the member pod.
		{"symmetry: a pod on the target refuses ours on its host", nil,
			[]runtime.Object{podOn("other", "lonely", "node9", nil, nil, withAffinity(antiAffinity(term(host, ours, listed("ns")))))}, "zb", "other/lonely"},
		{"symmetry: its term reads its own namespace only", nil,
			[]runtime.Object{podOn("other", "lonely", "node9", nil, nil, withAffinity(antiAffinity(term(host, ours))))}, "zb", ""},
		{"symmetry: a pod in the target's zone refuses ours in its zone", nil,
			[]runtime.Object{podOn("other", "lonely", "node2", nil, nil, withAffinity(antiAffinity(term(zone, ours, allNamespaces))))}, "zb", "other/lonely"},
		{"symmetry: that pod in another zone", nil,
			[]runtime.Object{podOn("other", "lonely", "node3", nil, nil, withAffinity(antiAffinity(term(zone, ours, allNamespaces))))}, "zb", ""},
		{"symmetry: its anti-affinity names other pods", nil,
			[]runtime.Object{podOn("other", "lonely", "node9", nil, nil, withAffinity(antiAffinity(term(host, db, allNamespaces))))}, "zb", ""},
		// The member's own pod leaves: its anti-affinity to its kind
		// does not count itself.
		{"the member's own pod is not counted", antiAffinity(term(zone, ours)), nil, "zb", ""},
	} {
		objs := append([]runtime.Object{localPV("f-good", "node9", "local", "1Gi"), node("node2", "zb"), node("node3", "zc")}, c.pods...)
		kc, pc := podMoveWorld(objs...)
		updateNode(t, kc, "node9", func(n *corev1.Node) {
			if c.targetZone != "" {
				n.Labels[zone] = c.targetZone
			}
		})
		withTemplate(t, kc, corev1.PodSpec{Affinity: c.affinity})
		if c.name == "the member's own pod is not counted" {
			// Its pod (on node1) in the target's zone: gone from there
			// once moved.
			if _, err := kc.CoreV1().Nodes().Create(ctx, node("node1", "zb"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		f := pc.Facts(ctx, "node9", journal.Record{}, false)
		if f.Err != "" || (c.broken == "") != (f.TargetPodAffinity == "") || !strings.Contains(f.TargetPodAffinity, c.broken) {
			t.Errorf("%s: pod affinity %q (err %q), want %q", c.name, f.TargetPodAffinity, f.Err, c.broken)
		}
	}
}
