package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// claimWorld is a StatefulSet member pod etcd-2 on node2, run through the
// gate on stateDir, its data on claim data-etcd-2: pod(uid, pvc) and
// claim(uid, pv) make its objects, the local PVs pv-1 and pv-3 exist.
type claimWorld struct {
	stateDir string
	sts      *appsv1.StatefulSet
	etcd     corev1.Container
	volumes  []corev1.Volume
}

func newClaimWorld(t *testing.T) claimWorld {
	agentDir := t.TempDir()
	etcd := corev1.Container{Name: "etcd",
		Command: []string{"/etcd-agent", "gate", "--member-source=pods", "--state-dir=/agent/members/ns_$(POD_NAME)", "--",
			"etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data",
			"--initial-advertise-peer-urls=http://10.0.0.3:2380", "--advertise-client-urls=http://10.0.0.3:2379"},
		Env:          []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}, {Name: "agent-state", MountPath: "/agent"}}}
	state := corev1.Volume{Name: "agent-state", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: agentDir}}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "ns", UID: "sts-1"},
		Spec: appsv1.StatefulSetSpec{VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{state}, Containers: []corev1.Container{etcd}}}}}
	return claimWorld{stateDir: agentDir + "/members/ns_etcd-2", sts: sts, etcd: etcd, volumes: []corev1.Volume{state}}
}

func (w claimWorld) pod(uid string) *corev1.Pod {
	vols := append(slices.Clone(w.volumes), corev1.Volume{Name: "data",
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-etcd-2"}}})
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-2", Namespace: "ns", UID: types.UID(uid),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "etcd", UID: "sts-1", Controller: ptrTo(true)}}},
		Spec:   corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{w.etcd}, Volumes: vols},
		Status: corev1.PodStatus{PodIP: "10.0.0.3"}}
}

func (claimWorld) claim(uid, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-etcd-2", Namespace: "ns", UID: types.UID(uid)},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
}

// began is the member as the recovery read it: pod-1 on claim uid-1 (pv-1).
func (w claimWorld) began(t *testing.T, p *podMembers) membersource.PodMember {
	t.Helper()
	m, err := membersource.FromPod(w.pod("pod-1"), p.vols, "")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A recovery begun on the member's claim must not stop the pod once it was
// re-created on another claim (seen in a parallel e2e run: the old PV's
// data dir quarantined and prepared, the new pod on the restored PV held by
// its gate, the learner stalled, a membership change made for nothing).
func TestAPodOnANewClaimIsNotStoppedForARecoveryBegunOnTheOld(t *testing.T) {
	w := newClaimWorld(t)
	kc := fake.NewClientset(w.pod("pod-1"), w.claim("uid-1", "pv-1"), w.sts, localPV("pv-1", "node2", "local", "1Gi"), localPV("pv-3", "node2", "local", "1Gi"))
	p := &podMembers{kc: kc, vols: apiVolumes{kc: kc}}
	began := w.began(t, p)
	if err := p.stoppable(began, w.stateDir, &began); err != nil {
		t.Fatalf("the pod on the claim the recovery began on: %v", err)
	}
	// A restore: the claim and the pod deleted, both re-created on pv-3.
	ctx := context.Background()
	if err := kc.CoreV1().Pods("ns").Delete(ctx, "etcd-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kc.CoreV1().PersistentVolumeClaims("ns").Delete(ctx, "data-etcd-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().PersistentVolumeClaims("ns").Create(ctx, w.claim("uid-2", "pv-3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Pods("ns").Create(ctx, w.pod("pod-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := p.stoppable(began, w.stateDir, &began)
	if err == nil || !strings.Contains(err.Error(), "read again under its new claim") || !strings.Contains(err.Error(), "/pv/pv-3/data") {
		t.Fatalf("the pod re-created on pv-3: %v, want a refusal naming /pv/pv-3/data (the loop restarts there)", err)
	}
	wantDataMoved(t, err)
	// The pod move's check (no recovery's member) still lets it go.
	if err := p.stoppable(began, w.stateDir, nil); err != nil {
		t.Fatalf("without a member to keep: %v", err)
	}
}

// A claim being deleted with its pod (a restore under way) would bring the
// successor up on a new claim: the pod on it is not stopped.
func TestAPodWhoseClaimIsBeingDeletedIsNotStopped(t *testing.T) {
	w := newClaimWorld(t)
	now := metav1.Now()
	claim := w.claim("uid-1", "pv-1")
	claim.DeletionTimestamp, claim.Finalizers = &now, []string{"kubernetes.io/pvc-protection"}
	kc := fake.NewClientset(w.pod("pod-1"), claim, w.sts, localPV("pv-1", "node2", "local", "1Gi"))
	p := &podMembers{kc: kc, vols: apiVolumes{kc: kc}}
	began := w.began(t, p)
	err := p.stoppable(began, w.stateDir, &began)
	if err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Fatalf("%v, want a refusal: the claim is being deleted", err)
	}
	wantDataMoved(t, err)
}

// A template that mounts the data elsewhere leaves the pod as it is (the
// loop is not restarted): the refusal says what a person must do.
func TestAPodWhoseTemplateMovesItsDataIsNotStopped(t *testing.T) {
	w := newClaimWorld(t)
	sts := w.sts.DeepCopy()
	sts.Spec.Template.Spec.Containers[0].VolumeMounts[0].SubPath = "v2"
	kc := fake.NewClientset(w.pod("pod-1"), w.claim("uid-1", "pv-1"), sts, localPV("pv-1", "node2", "local", "1Gi"))
	p := &podMembers{kc: kc, vols: apiVolumes{kc: kc}}
	began := w.began(t, p)
	err := p.stoppable(began, w.stateDir, &began)
	if err == nil || !strings.Contains(err.Error(), "roll the pod") {
		t.Fatalf("%v, want a refusal asking for the pod to be rolled", err)
	}
	wantDataMoved(t, err)
}

// The pod checked is the pod deleted: a successor on a new claim that
// appears between the runtime's check and its delete is not deleted.
func TestTheRuntimeNeverDeletesASuccessorOnANewClaim(t *testing.T) {
	w := newClaimWorld(t)
	kc := fake.NewClientset(w.pod("pod-1"), w.claim("uid-1", "pv-1"), w.sts, localPV("pv-1", "node2", "local", "1Gi"), localPV("pv-3", "node2", "local", "1Gi"))
	p := &podMembers{kc: kc, vols: apiVolumes{kc: kc}}
	began := w.began(t, p)
	podGets := 0
	kc.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		podGets++
		if podGets == 2 { // the deleter's read: a restore swapped pod and claim meanwhile
			tr := kc.Tracker()
			for _, err := range []error{
				tr.Delete(corev1.SchemeGroupVersion.WithResource("pods"), "ns", "etcd-2"),
				tr.Delete(corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), "ns", "data-etcd-2"),
				tr.Add(w.claim("uid-2", "pv-3")), tr.Add(w.pod("pod-2")),
			} {
				if err != nil {
					t.Error(err)
				}
			}
		}
		return false, nil, nil
	})
	var deleted []types.UID
	kc.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		deleted = append(deleted, *a.(k8stesting.DeleteAction).GetDeleteOptions().Preconditions.UID)
		return false, nil, nil
	})
	deleter := podDeleter{kc: kc, ns: "ns", name: "etcd-2", node: "node2",
		check: func(ctx context.Context, pod *corev1.Pod) error { return p.onClaim(ctx, pod, began) }}
	rt := memberruntime.NewPod("ns/etcd-2", deleter, w.stateDir, func() error { return p.stoppable(began, w.stateDir, &began) },
		nil, t.TempDir(), nil, memberruntime.StopTimeout(2*time.Second))
	err := rt.Stop(context.Background())
	if len(deleted) != 0 {
		t.Fatalf("deleted pods %v for a recovery begun on claim uid-1", deleted)
	}
	if err == nil || !strings.Contains(err.Error(), "not stopped") {
		t.Fatalf("Stop: %v, want a refusal", err)
	}
	wantDataMoved(t, err)
	if _, held, _ := memberruntime.ReadHold(w.stateDir); held {
		t.Fatal("the refused stop left the running successor held at its gate")
	}
}

func TestSameClaimWantsTheSameDataDirAndClaimUID(t *testing.T) {
	began := membersource.PodMember{PVC: "data-etcd-2", PVCUID: "uid-1"}
	began.Identity.DataDir = "/mnt/pv/node2-pv-1/data"
	same := began
	if err := sameClaim(began, same); err != nil {
		t.Fatalf("same claim: %v", err)
	}
	newClaim := began
	newClaim.PVCUID = "uid-2"
	newClaim.Identity.DataDir = "/mnt/pv/node2-pv-3/data"
	otherPath := began
	otherPath.Identity.DataDir = "/mnt/pv/node2-pv-3/data"
	otherUID := began
	otherUID.PVCUID = "uid-2"
	for name, got := range map[string]membersource.PodMember{"new claim on another PV": newClaim, "another PV": otherPath, "a new claim": otherUID} {
		err := sameClaim(began, got)
		if err == nil || !strings.Contains(err.Error(), "not stopped") || !strings.Contains(err.Error(), began.Identity.DataDir) {
			t.Errorf("%s: %v, want a refusal naming %s", name, err, began.Identity.DataDir)
		}
	}
}

// wantDataMoved: err is the executor's refusal with its reason code (it
// ends the attempt at once; TestAStepRefusalEndsTheAttemptAtOnceWithItsReason).
func wantDataMoved(t *testing.T, err error) {
	t.Helper()
	if r, ok := plan.RefusalOf(err); !ok || r.Reason != plan.ReasonMemberDataMoved {
		t.Fatalf("%v: not a refusal with reason %s", err, plan.ReasonMemberDataMoved)
	}
}

func ptrTo[T any](v T) *T { return &v }
