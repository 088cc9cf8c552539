package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Issue 38: a pod no StatefulSet controls would not come back as this
// member held by its gate (a bare pod never comes back; a ReplicaSet's
// has another name, state dir and no hold; a StatefulSet of the same name
// re-created after an orphaning delete is not its controller): the pod
// runtime refuses to stop it, as the steward does (not-gated), before any
// delete and before any hold.
func TestThePodRuntimeNeverStopsAPodNoStatefulSetControls(t *testing.T) {
	owned := func(kind, apiVersion, name, uid string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: k8stypes.UID(uid), Controller: ptrTo(true)}}
	}
	for _, c := range []struct {
		name   string
		owners []metav1.OwnerReference
		stsUID string // "": no StatefulSet etcd
		want   string
	}{
		{"a bare pod", nil, "sts-1", "no controller re-creates the pod"},
		{"an owner that is not its controller", []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "etcd", UID: "sts-1"}}, "sts-1", "no controller re-creates the pod"},
		{"a ReplicaSet's pod", owned("ReplicaSet", "apps/v1", "etcd", "rs-1"), "sts-1", "whose template the agent does not read"},
		{"its StatefulSet gone", owned("StatefulSet", "apps/v1", "etcd", "sts-1"), "", "is gone"},
		// Deleted with --cascade=orphan, then created again.
		{"a StatefulSet of its name re-created after an orphaning delete", owned("StatefulSet", "apps/v1", "etcd", "sts-1"), "sts-2", "is not the pod's controller"},
	} {
		w := newClaimWorld(t)
		pod := w.pod("pod-1")
		pod.OwnerReferences = c.owners
		objs := []runtime.Object{pod, w.claim("uid-1", "pv-1"), localPV("pv-1", "node2", "local", "1Gi")}
		if c.stsUID != "" {
			sts := w.sts.DeepCopy()
			sts.UID = k8stypes.UID(c.stsUID)
			objs = append(objs, sts)
		}
		kc := fake.NewClientset(objs...)
		var deleted int
		kc.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			deleted++
			return false, nil, nil
		})
		p := &podMembers{kc: kc, vols: apiVolumes{kc: kc}}
		began := w.began(t, p)
		for _, want := range []*membersource.PodMember{&began, nil} { // a recovery's stop, a move's check
			err := p.stoppable(began, w.stateDir, want)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s (recovery %v): %v, want a refusal saying %q", c.name, want != nil, err, c.want)
				continue
			}
			wantReason(t, err, plan.ReasonNotGated)
		}
		deleter := podDeleter{kc: kc, ns: "ns", name: "etcd-2", node: "node2",
			check: func(ctx context.Context, pod *corev1.Pod) error { return p.onClaim(ctx, pod, began) }}
		rt := memberruntime.NewPod("ns/etcd-2", deleter, w.stateDir, func() error { return p.stoppable(began, w.stateDir, &began) },
			nil, t.TempDir(), nil, memberruntime.StopTimeout(2*time.Second))
		err := rt.Stop(context.Background())
		if deleted != 0 {
			t.Errorf("%s: the pod was deleted", c.name)
		}
		if _, held, _ := memberruntime.ReadHold(w.stateDir); held {
			t.Errorf("%s: the refused stop left the pod held at its gate", c.name)
		}
		if err == nil {
			t.Errorf("%s: Stop: no error", c.name)
			continue
		}
		wantReason(t, err, plan.ReasonNotGated)
	}
}

// wantReason: err is the executor's step refusal with reason (it ends the
// attempt at once; TestAStepRefusalEndsTheAttemptAtOnceWithItsReason).
func wantReason(t *testing.T, err error, reason plan.Reason) {
	t.Helper()
	if r, ok := plan.RefusalOf(err); !ok || r.Reason != reason {
		t.Errorf("%v: not a refusal with reason %s", err, reason)
	}
}
