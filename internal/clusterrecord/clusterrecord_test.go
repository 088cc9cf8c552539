package clusterrecord_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/etcd-agent/etcd-agent/internal/clusterrecord"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// shared is one real etcd + kube-apiserver for this package's tests; each
// test uses a cluster name of its own.
var shared = labtest.NewShared("clusterrecord", lab.Options{Nodes: 1})

func TestMain(m *testing.M) { shared.Main(m) }

func pinOf(member string, cluster, id uint64) pin.Pin {
	at := time.Unix(1_700_000_000, 0).UTC()
	return pin.Pin{Member: member, ClusterID: record.MemberID(cluster), MemberID: record.MemberID(id), FirstSeenAt: at, SeenAt: at}
}

// The record keeps one pin per member, created on the first write with its
// owner (the StatefulSet, so it goes with it), and concurrent writers of
// different members (three agents on three nodes) all land.
func TestAClustersRecordKeepsEveryMembersPinAcrossConcurrentWriters(t *testing.T) {
	kc := shared.KubeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owner := &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "etcd", UID: "0b0e6d3c-1111-4a4a-9e9e-000000000001",
		Controller: ptr(true), BlockOwnerDeletion: ptr(true)}
	s := clusterrecord.Store{KC: kc, Namespace: "default", Cluster: "default/" + strings.ToLower(t.Name()), Owner: owner}
	t.Cleanup(func() {
		_ = kc.CoreV1().ConfigMaps("default").Delete(context.Background(), clusterrecord.Name(s.Cluster), metav1.DeleteOptions{})
	})

	if pins, seen, err := s.ReadPins(ctx); err != nil || seen || len(pins) != 0 {
		t.Fatalf("no record: %v %v %v", pins, seen, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.WritePin(ctx, pinOf(fmt.Sprintf("etcd-%d", i), 0xc1, uint64(0x10+i)), true)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WritePin(ctx, pinOf("etcd-1", 0xc1, 0x21), false); err != nil { // etcd-1 rejoined under a new ID
		t.Fatal(err)
	}
	pins, seen, err := s.ReadPins(ctx)
	if err != nil || !seen || len(pins) != 3 || pins["etcd-0"].MemberID != 0x10 || pins["etcd-1"].MemberID != 0x21 || pins["etcd-2"].MemberID != 0x12 {
		t.Fatalf("record %+v seen=%v err=%v", pins, seen, err)
	}
	cm, err := kc.CoreV1().ConfigMaps("default").Get(ctx, clusterrecord.Name(s.Cluster), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != owner.UID || cm.OwnerReferences[0].Controller != nil || cm.OwnerReferences[0].BlockOwnerDeletion != nil {
		t.Fatalf("owner references %+v: want the StatefulSet, neither controller nor blocking", cm.OwnerReferences)
	}
	if cm.Annotations[clusterrecord.AnnotationCluster] != s.Cluster || cm.Labels[clusterrecord.LabelRecord] == "" {
		t.Fatalf("record metadata %v %v", cm.Annotations, cm.Labels)
	}
}

// A ConfigMap under the record's name that is not this cluster's record,
// or whose pins cannot be decoded, is an error, never "no record" (that
// would let a member bootstrap), and is not overwritten.
func TestARecordThatIsNotThisClustersIsAnErrorAndIsKept(t *testing.T) {
	kc := shared.KubeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct{ name, cluster, data string }{
		{"another cluster's", "default/someone-else", `{}`},
		{"garbage", "", `{"etcd-0":`},
	} {
		s := clusterrecord.Store{KC: kc, Namespace: "default", Cluster: "default/" + strings.ToLower(t.Name()) + "-" + strings.ReplaceAll(tc.name, "'", "")}
		if tc.cluster == "" {
			tc.cluster = s.Cluster
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: clusterrecord.Name(s.Cluster), Namespace: "default",
			Annotations: map[string]string{clusterrecord.AnnotationCluster: tc.cluster}}, Data: map[string]string{clusterrecord.DataKey: tc.data}}
		if _, err := kc.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kc.CoreV1().ConfigMaps("default").Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
		})
		if _, _, err := s.ReadPins(ctx); err == nil {
			t.Fatalf("%s: read as a record", tc.name)
		}
		if err := s.WritePin(ctx, pinOf("etcd-0", 0xc1, 0x10), true); err == nil {
			t.Fatalf("%s: written over", tc.name)
		}
		got, err := kc.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil || got.Data[clusterrecord.DataKey] != tc.data {
			t.Fatalf("%s: changed: %v %v", tc.name, got.Data, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// From review 9: a cluster created again from scratch under the same name
// (scaled to 0, its PVCs deleted, scaled up) found its predecessor's record:
// every new member adopted an old pin and every gate held for good. A record
// none of whose claims exists any more is an earlier incarnation's: it
// reads as none, and the first new pin replaces it. One live claim keeps it
// (the steward deletes one member's claim at a time).
func TestARecordWhoseClaimsAreAllGoneIsAnEarlierIncarnations(t *testing.T) {
	kc := shared.KubeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := clusterrecord.Store{KC: kc, Namespace: "default", Cluster: "default/" + strings.ToLower(t.Name())}
	t.Cleanup(func() {
		_ = kc.CoreV1().ConfigMaps("default").Delete(context.Background(), clusterrecord.Name(s.Cluster), metav1.DeleteOptions{})
	})
	claim := func(name string) *corev1.PersistentVolumeClaim {
		c, err := kc.CoreV1().PersistentVolumeClaims("default").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kc.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		return c
	}
	prefix := strings.ToLower(t.Name())[:20]
	c0, c1 := claim(prefix+"-data-0"), claim(prefix+"-data-1")
	on := func(p pin.Pin, c *corev1.PersistentVolumeClaim) pin.Pin {
		p.ClaimName, p.ClaimUID = c.Name, string(c.UID)
		return p
	}
	for _, p := range []pin.Pin{on(pinOf("etcd-0", 0xc1, 0x10), c0), on(pinOf("etcd-1", 0xc1, 0x11), c1)} {
		if err := s.WritePin(ctx, p, true); err != nil {
			t.Fatal(err)
		}
	}
	// Every claim being deleted while the pods still run (Terminating:
	// in use): the cluster lives, and a member's write-back of its pin
	// keeps the others' (review 10).
	for _, c := range []*corev1.PersistentVolumeClaim{c0, c1} {
		if err := kc.CoreV1().PersistentVolumeClaims("default").Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WritePin(ctx, on(pinOf("etcd-1", 0xc1, 0x11), c1), false); err != nil {
		t.Fatal(err)
	}
	if pins, seen, err := s.ReadPins(ctx); err != nil || !seen || len(pins) != 2 {
		t.Fatalf("a record whose claims are Terminating: %+v seen=%v err=%v, want both pins", pins, seen, err)
	}
	// The steward freed etcd-1 (its claim gone): etcd-0's claim lives.
	gone(t, c1.Name)
	if pins, seen, err := s.ReadPins(ctx); err != nil || !seen || pins["etcd-1"].MemberID != 0x11 {
		t.Fatalf("a record with a live claim: %+v %v %v", pins, seen, err)
	}
	// Every claim gone (the cluster created again from scratch).
	gone(t, c0.Name)
	if pins, seen, err := s.ReadPins(ctx); err != nil || seen || len(pins) != 0 {
		t.Fatalf("an earlier incarnation's record reads %+v seen=%v err=%v, want none", pins, seen, err)
	}
	n0 := claim(prefix + "-data-0b")
	if err := s.WritePin(ctx, on(pinOf("etcd-0", 0xc2, 0x20), n0), true); err != nil {
		t.Fatal(err)
	}
	pins, seen, err := s.ReadPins(ctx)
	if err != nil || !seen || len(pins) != 1 || pins["etcd-0"].MemberID != 0x20 {
		t.Fatalf("the new incarnation's first pin did not replace the record: %+v %v %v", pins, seen, err)
	}
}

// gone lets a deleted claim go: no controller-manager runs here to drop
// its protection finalizer once no pod uses it.
func gone(t *testing.T, name string) {
	t.Helper()
	kc := shared.KubeClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kc.CoreV1().PersistentVolumeClaims("default").Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := kc.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("claim %s still there: %v", name, err)
	}
}
