package steward

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A member pod on a lost node with two node-local claims (data and a
// dedicated WAL volume) and one network claim, its member already removed
// by a steward. The fake API keeps a deleted claim Terminating while its
// pod exists (the pvc-protection finalizer), as a real one does.
func lostPodWithTwoLocalClaims(t *testing.T) (*Steward, *corev1.Pod, memberstate.Result) {
	t.Helper()
	etcd := []string{"/etcd-agent", "gate", "--member-source=pods", "--state-dir=/agent/members/clusters-a_$(POD_NAME)", "--",
		"etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd", "--initial-advertise-peer-urls=http://$(POD_IP):2380", "--advertise-client-urls=http://$(POD_IP):2379"}
	ctr := corev1.Container{Name: "etcd", Command: etcd,
		Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}, {Name: "wal", MountPath: "/var/lib/etcd-wal"}, {Name: "agent-state", MountPath: "/agent"}}}
	agentState := corev1.Volume{Name: "agent-state", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/etcd-agent"}}}
	claimVol := func(vol, claim string) corev1.Volume {
		return corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "clusters-a", UID: "u-sts"},
		Spec: appsv1.StatefulSetSpec{VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}, {ObjectMeta: metav1.ObjectMeta{Name: "wal"}}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{agentState}, Containers: []corev1.Container{ctr}}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node3", Labels: map[string]string{corev1.LabelHostname: "node3"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	s, now := stewardUnderTest(t, sts, node)
	s.m = metrics.New()
	s.c.AutoHeal = true
	s.self = func() membersource.PodMember {
		return membersource.PodMember{Identity: membersource.PodMember{}.Identity, Namespace: "clusters-a", Name: "etcd-0"}
	}
	ctx := context.Background()
	local := &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node3"}}}}}}}
	for _, c := range []struct {
		claim, pv string
		affinity  *corev1.VolumeNodeAffinity
	}{{"data-etcd-2", "pv-data", local}, {"wal-etcd-2", "pv-wal", local}, {"net-etcd-2", "pv-net", nil}} {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: c.pv},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete, NodeAffinity: c.affinity}}
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: c.claim, Namespace: "clusters-a", UID: types.UID("uid-" + c.claim)},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: c.pv}}
		if _, err := s.kc.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.kc.CoreV1().PersistentVolumeClaims("clusters-a").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kc := s.kc.(*fake.Clientset)
	kc.PrependReactor("delete", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		o, err := kc.Tracker().Get(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), "clusters-a", name)
		if err != nil {
			return true, nil, err
		}
		pvc := o.(*corev1.PersistentVolumeClaim).DeepCopy()
		ts := metav1.NewTime(*now)
		pvc.DeletionTimestamp, pvc.Finalizers = &ts, []string{"kubernetes.io/pvc-protection"}
		return true, nil, kc.Tracker().Update(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), pvc, "clusters-a")
	})
	p := stuckPod()
	p.Namespace = "clusters-a"
	p.Annotations = map[string]string{AnnotationRemovedMember: "c1/3"}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "etcd", UID: "u-sts", Controller: ptrTo(true)}}
	p.Spec.Containers = []corev1.Container{ctr}
	p.Spec.Volumes = []corev1.Volume{claimVol("data", "data-etcd-2"), claimVol("wal", "wal-etcd-2"), claimVol("net", "net-etcd-2"), agentState}
	if _, err := s.kc.CoreV1().Pods("clusters-a").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	voter := func(id uint64, name string) observation.Member {
		return observation.Member{ID: id, Name: name, PeerURLs: []string{"http://" + name + ":2380"}, ClientURLs: []string{"http://" + name + ":2379"}, Serving: true}
	}
	r := memberstate.Result{Verdict: memberstate.Verdict{State: memberstate.Healthy},
		Observation: observation.Observation{ClusterID: 0xc1, LeaderID: 1, Members: []observation.Member{voter(1, "etcd-0"), voter(2, "etcd-1")},
			Local: observation.Local{Match: observation.MatchOK, ID: 1, DataDirClass: "ok"}}}
	s.observe = func(context.Context) memberstate.Result { return r }
	// The node's Lease is first seen missing now, and judged stale after
	// the node-lost grace on the steward's clock.
	if _, err := s.facts(ctx, r, p); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(2 * time.Minute)
	return s, p, r
}

// From issue 38: the steward freed only the first node-local claim; a
// second one (a dedicated WAL volume) kept the re-created pod unschedulable
// and its PV was never kept.
func TestTheStewardFreesEveryNodeLocalClaimOfALostMember(t *testing.T) {
	s, p, r := lostPodWithTwoLocalClaims(t)
	ctx := context.Background()
	s.log = zaptest.NewLogger(t)
	s.steward(ctx, r, p)
	for _, c := range []struct {
		claim, pv string
		local     bool
	}{{"data-etcd-2", "pv-data", true}, {"wal-etcd-2", "pv-wal", true}, {"net-etcd-2", "pv-net", false}} {
		pv, err := s.kc.CoreV1().PersistentVolumes().Get(ctx, c.pv, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if retained := pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimRetain; retained != c.local {
			t.Errorf("PV %s: reclaim policy %s; want Retain only for a node-local PV (local %v)", c.pv, pv.Spec.PersistentVolumeReclaimPolicy, c.local)
		}
		pvc, err := s.kc.CoreV1().PersistentVolumeClaims("clusters-a").Get(ctx, c.claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if deleting := pvc.DeletionTimestamp != nil; deleting != c.local {
			t.Errorf("claim %s: deleting %v; want deleted only when bound to a node-local PV (local %v)", c.claim, deleting, c.local)
		}
	}
	if _, err := s.kc.CoreV1().Pods("clusters-a").Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
		t.Error("the stuck pod is still there")
	}
}

// A steward that died after freeing the first claim is resumed from what
// the API shows: the second claim is freed, the first not touched again.
func TestAResumedStewardFreesTheClaimsLeft(t *testing.T) {
	s, p, r := lostPodWithTwoLocalClaims(t)
	ctx := context.Background()
	if _, err := s.kc.CoreV1().PersistentVolumes().Patch(ctx, "pv-data", types.MergePatchType, []byte(`{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.kc.CoreV1().PersistentVolumeClaims("clusters-a").Delete(ctx, "data-etcd-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var deletes []string
	s.kc.(*fake.Clientset).PrependReactor("delete", "persistentvolumeclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		deletes = append(deletes, a.(k8stesting.DeleteAction).GetName())
		return false, nil, nil
	})
	s.steward(ctx, r, p)
	pv, _ := s.kc.CoreV1().PersistentVolumes().Get(ctx, "pv-wal", metav1.GetOptions{})
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Errorf("PV pv-wal: reclaim policy %s, want Retain", pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if len(deletes) != 1 || deletes[0] != "wal-etcd-2" {
		t.Errorf("claims deleted on resume: %v, want [wal-etcd-2] (data-etcd-2 is already deleting)", deletes)
	}
}
