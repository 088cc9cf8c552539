package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// localPV is a PV on node (hostname affinity), of class, size.
func localPV(name, node, class, size string, mods ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: class,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/pv/" + name}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}
	for _, m := range mods {
		m(pv)
	}
	return pv
}

// podMoveWorld: member pod ns/etcd-1 on node1 with claim data-etcd-1 bound
// to old-pv (node1); target node9 Ready; extra objects added.
func podMoveWorld(extra ...runtime.Object) (*fake.Clientset, podClaims) {
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-etcd-1", Namespace: "ns", UID: "claim-1"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptrTo("local"),
			VolumeName: "old-pv", Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	objs := append([]runtime.Object{claim,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-1", Namespace: "ns", UID: "pod-1", Labels: map[string]string{membersource.ClusterLabel: "a"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "etcd", UID: "sts-1", Controller: ptrTo(true)}}},
			Spec: corev1.PodSpec{NodeName: "node1"}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "ns", UID: "sts-1"},
			Spec: appsv1.StatefulSetSpec{Replicas: ptrTo(int32(3)), VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node9", Labels: map[string]string{corev1.LabelHostname: "node9"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}},
		localPV("old-pv", "node1", "local", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "ns", Name: "data-etcd-1", UID: "claim-1"}
			pv.Status.Phase = corev1.VolumeBound
		}),
	}, extra...)
	kc := fake.NewClientset(objs...)
	pm := membersource.PodMember{Key: "ns/etcd-1", Namespace: "ns", Name: "etcd-1", Cluster: "a", PVC: "data-etcd-1", PV: "old-pv", PVCUID: "claim-1", Node: "node1"}
	return kc, podClaims{kc: kc, node: "node1", cur: func() membersource.PodMember { return pm }, ungated: func() error { return nil }}
}

// Only a PV the claim can bind on the target is offered: Available,
// unclaimed, the claim's class, at least its size, on the target.
func TestAPodMoveOffersOnlyAPVTheClaimBindsOnTheTarget(t *testing.T) {
	_, pc := podMoveWorld(
		localPV("a-other-class", "node9", "fast", "1Gi"),
		localPV("b-claimed", "node9", "local", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "x", Name: "y"}
		}),
		localPV("c-other-node", "node5", "local", "1Gi"),
		localPV("d-too-small", "node9", "local", "100Mi"),
		localPV("e-released", "node9", "local", "1Gi", func(pv *corev1.PersistentVolume) { pv.Status.Phase = corev1.VolumeReleased }),
		localPV("f-good", "node9", "local", "2Gi"),
	)
	f := pc.Facts(context.Background(), "node9", journal.Record{}, false)
	if f.Err != "" || !f.TargetFound || !f.TargetReady || f.FreePV != "f-good" || !f.ClaimBound || f.OldPVRetained || !f.PodOnNode || f.ReservedPV != "" ||
		f.NotMovable != "" || f.Replicas != 3 || f.TargetUnschedulable != "" || f.ClaimUID != "claim-1" || f.PV != "old-pv" {
		t.Fatalf("facts %+v, want node9 Ready, free PV f-good, the claim bound here, the pod here, a StatefulSet's of 3", f)
	}
	// A PV pinned to a zone (or to a set of nodes) would let the pod land
	// elsewhere: not offered.
	_, pc = podMoveWorld(localPV("z-zone", "node9", "local", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0] = corev1.NodeSelectorRequirement{
			Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}
	}), localPV("z-two-nodes", "node9", "local", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values = []string{"node9", "node1"}
	}))
	if f := pc.Facts(context.Background(), "node9", journal.Record{}, false); f.FreePV != "" {
		t.Fatalf("offered %s, which is not pinned to node9 alone", f.FreePV)
	}
	// No such PV: none offered (the move is refused no-free-pv).
	_, pc = podMoveWorld(localPV("d-too-small", "node9", "local", "100Mi"))
	if f := pc.Facts(context.Background(), "node9", journal.Record{}, false); f.FreePV != "" {
		t.Fatalf("offered %s", f.FreePV)
	}
	// A pod no StatefulSet re-creates cannot move.
	kc, pc := podMoveWorld(localPV("f-good", "node9", "local", "1Gi"))
	bare, _ := kc.CoreV1().Pods("ns").Get(context.Background(), "etcd-1", metav1.GetOptions{})
	bare.OwnerReferences = nil
	if _, err := kc.CoreV1().Pods("ns").Update(context.Background(), bare, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if f := pc.Facts(context.Background(), "node9", journal.Record{}, false); f.NotMovable == "" {
		t.Fatal("a pod without a StatefulSet is movable")
	}
	// A taint the pod does not tolerate, or a cordon: not schedulable there.
	kc, pc = podMoveWorld(localPV("f-good", "node9", "local", "1Gi"))
	n9, _ := kc.CoreV1().Nodes().Get(context.Background(), "node9", metav1.GetOptions{})
	n9.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	if _, err := kc.CoreV1().Nodes().Update(context.Background(), n9, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if f := pc.Facts(context.Background(), "node9", journal.Record{}, false); !strings.Contains(f.TargetUnschedulable, "dedicated=db:NoSchedule") {
		t.Fatalf("unschedulable %q", f.TargetUnschedulable)
	}
	// A member pod of the cluster on the target is named.
	_, pc = podMoveWorld(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-0", Namespace: "ns", Labels: map[string]string{membersource.ClusterLabel: "a"}}, Spec: corev1.PodSpec{NodeName: "node9"}})
	if f := pc.Facts(context.Background(), "node9", journal.Record{}, false); f.TargetHasMember != "ns/etcd-0" {
		t.Fatalf("target member %q", f.TargetHasMember)
	}
}

// The reservation pre-binds the PV to the claim's name (no UID: the next
// claim of that name), names the stored snapshot, and is then seen as this
// move's (and only this move's); a PV claimed meanwhile is not taken.
func TestAPodMoveReservesTheFreePVForItsClaimOnly(t *testing.T) {
	kc, pc := podMoveWorld(localPV("f-good", "node9", "local", "1Gi"))
	ctx := context.Background()
	j := journal.Record{ID: "rec1", Request: plan.ActionMoveAway, MoveTarget: "node9", OldMemberID: 0xabc, StoreKey: "k", SnapshotSHA256: "s", SnapshotBytes: 10}
	f := pc.Facts(ctx, "node9", j, false)
	f.ClusterID = 0xc1
	if err := pc.Do(ctx, plan.ReservePV, j, f); err != nil {
		t.Fatal(err)
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, "f-good", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := pv.Spec.ClaimRef; r == nil || r.Namespace != "ns" || r.Name != "data-etcd-1" || r.UID != "" {
		t.Fatalf("claimRef %+v, want ns/data-etcd-1 without a UID", r)
	}
	s, cluster, removed, err := nodereport.ParseMoveSeed(pv.Annotations[nodereport.AnnotationMoveSeed])
	if err != nil || s.Recovery != "rec1" || s.Key != "k" || cluster != 0xc1 || removed != 0xabc || s.From != "ns/etcd-1@node1" {
		t.Fatalf("move-seed %+v %x %x %v", s, cluster, removed, err)
	}
	if f := pc.Facts(ctx, "node9", j, false); f.ReservedPV != "f-good" || f.FreePV != "" {
		t.Fatalf("after the reservation: reserved %q, free %q", f.ReservedPV, f.FreePV)
	}
	other := j
	other.ID = "rec2"
	if f := pc.Facts(ctx, "node9", other, false); f.ReservedPV != "" {
		t.Fatalf("another recovery sees %s as its own", f.ReservedPV)
	}
	// Taken back (the move ends before the claim goes): free again.
	if err := pc.Do(ctx, plan.UnreservePV, j, pc.Facts(ctx, "node9", j, false)); err != nil {
		t.Fatal(err)
	}
	if f := pc.Facts(ctx, "node9", j, false); f.ReservedPV != "" || f.FreePV != "f-good" {
		t.Fatalf("after taking the reservation back: reserved %q, free %q", f.ReservedPV, f.FreePV)
	}
	if err := pc.Do(ctx, plan.ReservePV, j, f); err != nil {
		t.Fatal(err)
	}
	// Claimed by someone else between the look and the step: refused.
	kc2, pc2 := podMoveWorld(localPV("f-good", "node9", "local", "1Gi"))
	f2 := pc2.Facts(ctx, "node9", j, false)
	f2.ClusterID = 0xc1
	taken := localPV("f-good", "node9", "local", "1Gi", func(pv *corev1.PersistentVolume) {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "x", Name: "y"}
	})
	if _, err := kc2.CoreV1().PersistentVolumes().Update(ctx, taken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pc2.Do(ctx, plan.ReservePV, j, f2); err == nil || !strings.Contains(err.Error(), "no longer free") {
		t.Fatalf("reserving a PV claimed meanwhile: %v", err)
	}
	// Without the move's snapshot recorded, nothing is reserved.
	if err := pc2.Do(ctx, plan.ReservePV, journal.Record{ID: "rec3"}, f2); err == nil {
		t.Fatal("reserved without the move's snapshot")
	}
}
