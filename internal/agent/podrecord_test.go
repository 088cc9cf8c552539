package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/clusterrecord"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// From review 10: an agent whose member moved to another node (its old
// loop still running: a partition healed, a recovery open) wrote its old
// pin over the one the member's new node wrote. A pod member's pin is
// written only while its pod is bound to this node on the same claim.
// (A fake API here: what is tested is the agent's own check.)
func TestAPodMembersPinIsWrittenOnlyWhileItsPodAndClaimAreThisNodes(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-1", Namespace: "hc1", UID: "pod-1"}, Spec: corev1.PodSpec{NodeName: "node-a"}}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-etcd-1", Namespace: "hc1", UID: "claim-1"}}
	kc := fake.NewClientset(pod, claim)
	pm := membersource.PodMember{Key: "hc1/etcd-1", Namespace: "hc1", Name: "etcd-1", UID: "pod-1", Cluster: "hc1/etcd", PVC: "data-etcd-1", PVCUID: "claim-1"}
	at := time.Unix(1_700_000_000, 0).UTC()
	p := pin.Pin{Member: "etcd-1", ClusterID: 0xc1, MemberID: 0x11, FirstSeenAt: at, SeenAt: at}
	ctx := context.Background()
	read := func() map[string]pin.Pin {
		pins, _, err := clusterrecord.Store{KC: kc, Namespace: "hc1", Cluster: "hc1/etcd"}.ReadPins(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return pins
	}
	if err := (podRecord{kc: kc, node: "node-b", cur: func() membersource.PodMember { return pm }}).WritePin(ctx, p, true); err == nil ||
		!strings.Contains(err.Error(), "no longer") || len(read()) != 0 {
		t.Fatalf("a pod bound to another node: %v, record %v", err, read())
	}
	stale := pm
	stale.PVCUID = "claim-0" // the claim it ran on was deleted and made anew
	if err := (podRecord{kc: kc, node: "node-a", cur: func() membersource.PodMember { return stale }}).WritePin(ctx, p, true); err == nil || len(read()) != 0 {
		t.Fatalf("another claim: %v, record %v", err, read())
	}
	r := podRecord{kc: kc, node: "node-a", cur: func() membersource.PodMember { return pm }}
	if err := r.WritePin(ctx, p, true); err != nil {
		t.Fatal(err)
	}
	got := read()["etcd-1"]
	if got.MemberID != 0x11 || got.ClaimName != "data-etcd-1" || got.ClaimUID != "claim-1" {
		t.Fatalf("written %+v", got)
	}
	if r.Behind(got, true, p) {
		t.Fatal("our own pin on our claim reads as behind")
	}
	other := got
	other.ClaimUID = "claim-9"
	if !r.Behind(other, true, p) {
		t.Fatal("a pin on another claim must be checked (and written over only if the pod and claim are ours)")
	}
}
