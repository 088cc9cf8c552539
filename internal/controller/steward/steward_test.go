package steward

import (
	"context"
	"errors"
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A fake API is enough here: what is tested is the steward's own
// bookkeeping of what it saw, not what Kubernetes does.
func stewardUnderTest(t *testing.T, objs ...any) (*Steward, *time.Time) {
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
	s := New(Config{NodeName: "node1", Namespace: "etcd-agent", LeaseTTL: 30 * time.Second, NodeLostGrace: time.Minute, GracePeriod: 3 * time.Second},
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

// The steward frees a member's place only when the pod comes back through
// the start gate, for pods, on a node-local state dir: the pod itself and
// its own StatefulSet's template (the revision a rollout may re-create it
// from) are gated. Otherwise etcd could start on the new node before its
// agent prepared it. Nothing is read from the pod's claim (gone after the
// steward's third step).
func TestTheStewardReadsWhetherTheStatefulSetRecreatesThePodGated(t *testing.T) {
	etcd := []string{"etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd",
		"--initial-advertise-peer-urls=http://$(POD_IP):2380", "--advertise-client-urls=http://$(POD_IP):2379"}
	gate := func(flags ...string) []string {
		return append(append(append([]string{"/etcd-agent", "gate"}, flags...), "--"), etcd...)
	}
	gated := gate("--member-source=pods", "--state-dir=/agent/members/clusters-a_$(POD_NAME)")
	container := func(command []string) corev1.Container {
		return corev1.Container{Name: "etcd", Command: command,
			Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}, {Name: "agent-state", MountPath: "/agent"}}}
	}
	agentState := corev1.Volume{Name: "agent-state", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/etcd-agent"}}}
	claim := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-etcd-2"}}}
	sts := func(name, uid string, command []string, stateOnClaim bool) *appsv1.StatefulSet {
		vols := []corev1.Volume{agentState}
		if stateOnClaim {
			vols = nil
		}
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "clusters-a", UID: types.UID(uid)},
			Spec: appsv1.StatefulSetSpec{VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: vols, Containers: []corev1.Container{container(command)}}}}}
	}
	rolling := sts("rolling", "u-rolling", gated, false)
	rolling.Status.CurrentRevision, rolling.Status.UpdateRevision = "rolling-1", "rolling-2"
	s, _ := stewardUnderTest(t, sts("gated", "u-gated", gated, false), sts("no-gate", "u-no-gate", etcd, false),
		sts("gate-for-static-pods", "u-static", gate("--state-dir=/agent/members/clusters-a_$(POD_NAME)"), false),
		sts("gate-without-state-dir", "u-nostate", gate("--member-source=pods"), false),
		sts("state-dir-on-a-claim", "u-claim", gate("--member-source=pods", "--state-dir=/var/lib/etcd/agent"), true), rolling)
	kc := s.kc.(*fake.Clientset)
	kc.PrependReactor("get", "statefulsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "unreadable" {
			return true, nil, errors.New("the API is away")
		}
		return false, nil, nil
	})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node3"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	if _, err := s.kc.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := memberstate.Result{Observation: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 3, Name: "etcd-2", PeerURLs: []string{"http://10.0.0.3:2380"}}}}}
	owned := func(kind, apiVersion, name, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: ptrTo(true)}}
	}
	for _, c := range []struct {
		name    string
		owners  []metav1.OwnerReference
		command []string // the pod's own
		hash    string   // its controller-revision-hash
		want    string   // "" = gated
	}{
		{"gated pod, gated template", owned("StatefulSet", "apps/v1", "gated", "u-gated"), gated, "", ""},
		{"template without the gate", owned("StatefulSet", "apps/v1", "no-gate", "u-no-gate"), gated, "", "template: its etcd container does not run etcd through the start gate"},
		{"template's gate for static pods", owned("StatefulSet", "apps/v1", "gate-for-static-pods", "u-static"), gated, "", "lacks --member-source=pods"},
		{"template's gate without a state dir", owned("StatefulSet", "apps/v1", "gate-without-state-dir", "u-nostate"), gated, "", "no --state-dir"},
		{"template's state dir on a claim", owned("StatefulSet", "apps/v1", "state-dir-on-a-claim", "u-claim"), gated, "", "is on PVC data"},
		{"the pod itself without the gate (another revision may re-create it)", owned("StatefulSet", "apps/v1", "gated", "u-gated"), etcd, "", "the pod: its etcd container does not run etcd through the start gate"},
		{"no controller", nil, gated, "", "no controller re-creates the pod"},
		{"another kind of controller", owned("ReplicaSet", "apps/v1", "gated", "u-gated"), gated, "", "whose template the agent does not read"},
		{"a StatefulSet of another API group", owned("StatefulSet", "apps.kruise.io/v1beta1", "gated", "u-gated"), gated, "", "whose template the agent does not read"},
		{"a StatefulSet of that name that is not the pod's controller", owned("StatefulSet", "apps/v1", "gated", "u-old"), gated, "", "is not the pod's controller"},
		{"its StatefulSet gone", owned("StatefulSet", "apps/v1", "gone", "u-gone"), gated, "", "is gone"},
		{"a rollout, the pod of the current revision", owned("StatefulSet", "apps/v1", "rolling", "u-rolling"), gated, "rolling-1", ""},
		{"a rollout, the pod of neither revision", owned("StatefulSet", "apps/v1", "rolling", "u-rolling"), gated, "rolling-0", "is rolling out"},
	} {
		p := stuckPod()
		p.OwnerReferences = c.owners
		p.Labels = map[string]string{appsv1.ControllerRevisionHashLabelKey: c.hash}
		p.Spec.Containers = []corev1.Container{container(c.command)}
		p.Spec.Volumes = []corev1.Volume{claim, agentState}
		in, err := s.facts(context.Background(), r, p)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if (in.TemplateUngated == "") != (c.want == "") || !strings.Contains(in.TemplateUngated, c.want) {
			t.Errorf("%s: TemplateUngated %q, want %q", c.name, in.TemplateUngated, c.want)
		}
	}
	// A StatefulSet that cannot be read is no answer: the steward does
	// not judge the pod.
	p := stuckPod()
	p.OwnerReferences = owned("StatefulSet", "apps/v1", "unreadable", "u-x")
	if _, err := s.facts(context.Background(), r, p); err == nil {
		t.Fatal("facts with an unreadable StatefulSet: no error")
	}
}

func ptrTo[T any](v T) *T { return &v }

// The steward judges full observations only: a routine poll that reused
// the peers' last probe says nothing new about them. (Its pod lister is
// nil here: a steward that looked would fail.)
func TestTheStewardIgnoresAReusedProbe(t *testing.T) {
	s, _ := stewardUnderTest(t)
	r := memberstate.Result{Observation: observation.Observation{ClusterID: 0xc1, PeersReused: true}, Verdict: memberstate.Verdict{State: memberstate.Healthy}}
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("the steward looked at its cluster's pods on a reused probe: %v", p)
		}
	}()
	s.Consider(context.Background(), r)
}
