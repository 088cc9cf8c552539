package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// withTemplate sets the world's StatefulSet template (the pod the move
// re-creates on the target).
func withTemplate(t *testing.T, kc *fake.Clientset, spec corev1.PodSpec) {
	t.Helper()
	ctx := context.Background()
	sts, err := kc.AppsV1().StatefulSets("ns").Get(ctx, "etcd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sts.Spec.Template = corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "etcd"}}, Spec: spec}
	if _, err := kc.AppsV1().StatefulSets("ns").Update(ctx, sts, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// updateNode changes node name of the world.
func updateNode(t *testing.T, kc *fake.Clientset, name string, f func(*corev1.Node)) {
	t.Helper()
	n, err := kc.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f(n)
	if _, err := kc.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func requesting(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

// podOn is a pod bound to node in namespace ns, with labels and requests.
func podOn(ns, name, node string, labels map[string]string, req corev1.ResourceList, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req}}}}}
	for _, m := range mods {
		m(p)
	}
	return p
}

// From issue 38: a move checks what the scheduler checks of the target's
// resources: its allocatable, less what the pods bound to it request (any
// namespace; finished pods not), must cover the member pod's requests, and
// it must have room for one more pod; otherwise the target is named short,
// which the plan refuses (target-insufficient-resources) before any change.
func TestAPodMoveSeesWhetherTheTargetHasRoomForThePod(t *testing.T) {
	ctx := context.Background()
	kc, pc := podMoveWorld(localPV("f-good", "node9", "local", "1Gi"),
		podOn("other", "busy", "node9", nil, requesting("3", "1Gi")),
		podOn("other", "done", "node9", nil, requesting("4", "4Gi"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		podOn("other", "elsewhere", "node5", nil, requesting("4", "4Gi")))
	withTemplate(t, kc, corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Resources: corev1.ResourceRequirements{Requests: requesting("1500m", "2Gi")}}}})
	updateNode(t, kc, "node9", func(n *corev1.Node) {
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("10")}
	})
	f := pc.Facts(ctx, "node9", journal.Record{}, false)
	if f.Err != "" || !strings.Contains(f.TargetShort, "cpu") || strings.Contains(f.TargetShort, "memory") {
		t.Fatalf("4 CPUs allocatable, 3 requested there, the pod asks 1.5: short %q (err %q), want cpu named, not memory", f.TargetShort, f.Err)
	}
	// Room enough: not short.
	withTemplate(t, kc, corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Resources: corev1.ResourceRequirements{Requests: requesting("1", "2Gi")}}}})
	if f := pc.Facts(ctx, "node9", journal.Record{}, false); f.TargetShort != "" {
		t.Fatalf("the pod fits: short %q", f.TargetShort)
	}
	// No pod slot left.
	updateNode(t, kc, "node9", func(n *corev1.Node) { n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("1") })
	if f := pc.Facts(ctx, "node9", journal.Record{}, false); !strings.Contains(f.TargetShort, "pods") {
		t.Fatalf("one pod allowed, one there: short %q, want pods named", f.TargetShort)
	}
}

// From issue 38: a StatefulSet template's DoNotSchedule topology spread
// constraints are kept: the member's own pod leaves its domain, and the
// target's domain may then have at most maxSkew more matching pods than the
// emptiest eligible domain; a target without the topology label breaks it
// too. ScheduleAnyway constraints are the scheduler's preference only.
func TestAPodMoveSeesWhetherTheTargetKeepsTheTopologySpread(t *testing.T) {
	ctx := context.Background()
	etcd := map[string]string{"app": "etcd", membersource.ClusterLabel: "a"}
	zoneOf := map[string]string{"node1": "za", "node2": "zb", "node3": "zc"}
	world := func(targetZone string, when corev1.UnsatisfiableConstraintAction) (*fake.Clientset, podClaims) {
		kc, pc := podMoveWorld(localPV("f-good", "node9", "local", "1Gi"),
			podOn("ns", "etcd-0", "node2", etcd, nil), podOn("ns", "etcd-2", "node3", etcd, nil),
			podOn("other", "not-ours", "node1", etcd, nil)) // another namespace: not counted
		for n, z := range zoneOf {
			if n == "node1" {
				continue
			}
			_, _ = kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{corev1.LabelTopologyZone: z}}}, metav1.CreateOptions{})
		}
		_, _ = kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{corev1.LabelTopologyZone: "za"}}}, metav1.CreateOptions{})
		updateNode(t, kc, "node9", func(n *corev1.Node) {
			if targetZone != "" {
				n.Labels[corev1.LabelTopologyZone] = targetZone
			}
		})
		p, _ := kc.CoreV1().Pods("ns").Get(ctx, "etcd-1", metav1.GetOptions{})
		p.Labels = etcd
		_, _ = kc.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{})
		withTemplate(t, kc, corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: when, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "etcd"}}}}})
		return kc, pc
	}
	for _, c := range []struct {
		zone   string
		when   corev1.UnsatisfiableConstraintAction
		broken string // "" kept
	}{
		{"zb", corev1.DoNotSchedule, "skew 2"}, // za 0, zb 2, zc 1
		{"za", corev1.DoNotSchedule, ""},       // back in its own zone
		{"zd", corev1.DoNotSchedule, ""},       // a zone of its own: zd 1, za 0
		{"", corev1.DoNotSchedule, "no label"}, // the target has no zone
		{"zb", corev1.ScheduleAnyway, ""},      // a preference only
	} {
		_, pc := world(c.zone, c.when)
		f := pc.Facts(ctx, "node9", journal.Record{}, false)
		if f.Err != "" || (c.broken == "") != (f.TargetSpread == "") || !strings.Contains(f.TargetSpread, c.broken) {
			t.Errorf("target in zone %q (%s): spread %q (err %q), want %q", c.zone, c.when, f.TargetSpread, f.Err, c.broken)
		}
	}
}
