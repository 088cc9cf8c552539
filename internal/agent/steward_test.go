package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A fake API is enough here: what is tested is the steward's own
// bookkeeping of what it saw, not what Kubernetes does.
func stewardUnderTest(t *testing.T, objs ...any) (*steward, *time.Time) {
	t.Helper()
	var rt []any
	rt = append(rt, objs...)
	kc := fake.NewClientset()
	for _, o := range rt {
		switch o := o.(type) {
		case *corev1.Node:
			if _, err := kc.CoreV1().Nodes().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *coordv1.Lease:
			if _, err := kc.CoordinationV1().Leases(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case *appsv1.StatefulSet:
			if _, err := kc.AppsV1().StatefulSets(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := time.Unix(1_000_000, 0)
	s := newSteward(Config{NodeName: "node1", Namespace: "etcd-agent", LeaseTTL: 30 * time.Second, NodeLostGrace: time.Minute, GracePeriod: 3 * time.Second},
		kc, func() membersource.PodMember {
			return membersource.PodMember{Identity: membersource.PodMember{}.Identity}
		}, nil, nil, nil, nil, zap.NewNop())
	s.now = func() time.Time { return now }
	return s, &now
}

func stuckPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-2", Namespace: "clusters-a", UID: "u2"},
		Spec: corev1.PodSpec{NodeName: "node3", Containers: []corev1.Container{{Name: "etcd", Command: []string{"etcd", "--name=etcd-2", "--data-dir=/var/lib/etcd",
			"--initial-advertise-peer-urls=http://10.0.0.3:2380", "--advertise-client-urls=http://10.0.0.3:2379"}}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.3"}}
}

// From the review: the node Lease's renewTime is the kubelet's clock; the
// steward judges staleness by how long it has itself seen it unchanged.
func TestTheStewardTimesANodeLeaseOnItsOwnClock(t *testing.T) {
	ancient := metav1.NewMicroTime(time.Unix(0, 0)) // a kubelet whose clock is far behind ours
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node3"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	nl := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node3", Namespace: nodeLeaseNamespace}, Spec: coordv1.LeaseSpec{RenewTime: &ancient}}
	s, now := stewardUnderTest(t, node, nl)
	r := memberstate.Result{Observation: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 3, Name: "etcd-2", PeerURLs: []string{"http://10.0.0.3:2380"}}}}}
	in, err := s.facts(context.Background(), r, stuckPod())
	if err != nil {
		t.Fatal(err)
	}
	if in.NodeLeaseStaleFor != 0 || in.TargetSilentFor != 0 {
		t.Fatalf("first look: stale for %s, silent for %s; want 0 (an old renewTime on another clock proves nothing)", in.NodeLeaseStaleFor, in.TargetSilentFor)
	}
	*now = now.Add(90 * time.Second)
	in, _ = s.facts(context.Background(), r, stuckPod())
	if in.NodeLeaseStaleFor != 90*time.Second || in.TargetSilentFor != 90*time.Second {
		t.Fatalf("90 s later, unchanged: stale for %s, silent for %s", in.NodeLeaseStaleFor, in.TargetSilentFor)
	}
	renewed := metav1.NewMicroTime(time.Unix(5, 0))
	nl.Spec.RenewTime = &renewed
	if _, err := s.kc.CoordinationV1().Leases(nodeLeaseNamespace).Update(context.Background(), nl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(time.Second)
	in, _ = s.facts(context.Background(), r, stuckPod())
	if in.NodeLeaseStaleFor != 0 {
		t.Fatalf("the kubelet renewed: stale for %s, want 0", in.NodeLeaseStaleFor)
	}
}

// From the review: a new Lease handle per look never sees a dead holder's
// hold expire; the steward keeps one per cluster.
func TestTheStewardKeepsOneLeaseHandlePerCluster(t *testing.T) {
	s, _ := stewardUnderTest(t)
	a, err := s.leaseFor(0xc1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.leaseFor(0xc1)
	c, _ := s.leaseFor(0xc2)
	if a != b || a == c {
		t.Fatalf("handles: %p %p %p", a, b, c)
	}
}

func TestAPVIsNodeLocalByTheNodesLabels(t *testing.T) {
	pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "topology.lvm.csi/node", Operator: corev1.NodeSelectorOpIn, Values: []string{"worker-3"}}}}}}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node3", Labels: map[string]string{"topology.lvm.csi/node": "worker-3"}}}
	if !pvOnNode(pv, "node3", node) {
		t.Fatal("a CSI topology key naming the node must count")
	}
	if pvOnNode(pv, "node3", nil) {
		t.Fatal("without the Node, only the hostname can be matched")
	}
	other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node4", Labels: map[string]string{"topology.lvm.csi/node": "worker-4"}}}
	if pvOnNode(pv, "node4", other) {
		t.Fatal("another node's PV")
	}
}

// The steward frees a member's place only when the pod's StatefulSet
// re-creates it through the start gate, for pods, on a node-local state
// dir: otherwise etcd would start on the new node before its agent
// prepared it. The template is read without the pod's claim (gone after
// the steward's third step).
func TestTheStewardReadsWhetherTheStatefulSetRecreatesThePodGated(t *testing.T) {
	etcd := []string{"etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd",
		"--initial-advertise-peer-urls=http://$(POD_IP):2380", "--advertise-client-urls=http://$(POD_IP):2379"}
	gate := func(flags ...string) []string {
		return append(append(append([]string{"/etcd-agent", "gate"}, flags...), "--"), etcd...)
	}
	sts := func(name string, command []string, stateOnClaim bool) *appsv1.StatefulSet {
		vols := []corev1.Volume{{Name: "agent-state", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/etcd-agent"}}}}
		if stateOnClaim {
			vols = nil
		}
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "clusters-a"},
			Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: vols, Containers: []corev1.Container{{Name: "etcd", Command: command,
				Env:          []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}, {Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}, {Name: "agent-state", MountPath: "/agent"}}}}}}}}
	}
	gated := gate("--member-source=pods", "--state-dir=/agent/members/clusters-a_$(POD_NAME)")
	cases := []struct {
		sts  *appsv1.StatefulSet
		want string // "" = gated
	}{
		{sts("gated", gated, false), ""},
		{sts("no-gate", etcd, false), "does not run etcd through the start gate"},
		{sts("gate-for-static-pods", gate("--state-dir=/agent/members/clusters-a_$(POD_NAME)"), false), "lacks --member-source=pods"},
		{sts("gate-without-state-dir", gate("--member-source=pods"), false), "no --state-dir"},
		{sts("state-dir-on-a-claim", gate("--member-source=pods", "--state-dir=/var/lib/etcd/agent"), true), "is on PVC data"},
	}
	var objs []any
	for _, c := range cases {
		objs = append(objs, c.sts)
	}
	s, _ := stewardUnderTest(t, objs...)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node3"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	if _, err := s.kc.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := memberstate.Result{Observation: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 3, Name: "etcd-2", PeerURLs: []string{"http://10.0.0.3:2380"}}}}}
	for _, c := range append(cases, struct {
		sts  *appsv1.StatefulSet
		want string
	}{&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "gone"}}, ""}) {
		p := stuckPod()
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: c.sts.Name, UID: "s1", Controller: ptrTo(true)}}
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-etcd-2"}}}}
		in, err := s.facts(context.Background(), r, p)
		if err != nil {
			t.Fatalf("%s: %v", c.sts.Name, err)
		}
		if (in.TemplateUngated == "") != (c.want == "") || !strings.Contains(in.TemplateUngated, c.want) {
			t.Errorf("StatefulSet %s: TemplateUngated %q, want %q", c.sts.Name, in.TemplateUngated, c.want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
