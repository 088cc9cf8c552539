package nodereport_test

import (
	"errors"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/pin"
)

// The Node keeps one pin per member: writing one keeps the others, a pin
// reads back as written, and an annotation the agent did not write is an
// error (a reinstalled node must not take garbage for "never seen").
func TestNodePinsRoundTripPerMemberAndMalformedIsAnError(t *testing.T) {
	kc := newClient(t)
	n := newNode(t, kc, nil)
	ctx := ctxFor(t, 20*time.Second)
	if _, ok, err := nodereport.ReadPin(ctx, kc, n.Name, "m1"); ok || err != nil {
		t.Fatalf("no annotation: ok=%v err=%v", ok, err)
	}
	a := pin.Pin{Member: "m1", ClusterID: 0xc1, MemberID: 0xa, FirstSeenAt: time.Unix(10, 0).UTC(), SeenAt: time.Unix(10, 0).UTC()}
	b := pin.Pin{Member: "m2", ClusterID: 0xc2, MemberID: 0xb, FirstSeenAt: time.Unix(20, 0).UTC(), SeenAt: time.Unix(20, 0).UTC()}
	for _, p := range []pin.Pin{a, b} {
		if err := nodereport.WritePin(ctx, kc, n.Name, p); err != nil {
			t.Fatal(err)
		}
	}
	a.MemberID = 0xaa // m1 rejoined under a new ID
	if err := nodereport.WritePin(ctx, kc, n.Name, a); err != nil {
		t.Fatal(err)
	}
	for _, want := range []pin.Pin{a, b} {
		got, ok, err := nodereport.ReadPin(ctx, kc, n.Name, want.Member)
		if err != nil || !ok || got.MemberID != want.MemberID || got.ClusterID != want.ClusterID || !got.FirstSeenAt.Equal(want.FirstSeenAt) {
			t.Fatalf("%s: got %+v ok=%v err=%v, want %+v", want.Member, got, ok, err, want)
		}
	}
	bad := newNode(t, kc, map[string]string{nodereport.AnnotationPins: `{"m1": {"member": "m1"}}`})
	if _, _, err := nodereport.ReadPin(ctx, kc, bad.Name, "m1"); !errors.Is(err, nodereport.ErrMalformedPins) {
		t.Fatalf("malformed annotation: %v", err)
	}
}

// Review item (issue 41): "was it ever a member" counts only pins of this
// cluster: a node's pin of a member of the same name in another cluster
// (the cluster rebuilt, a Node name reused) does not make a never-seen
// member rejoin unasked.
func TestMemberPinnedAnywhereCountsOnlyThisClustersPins(t *testing.T) {
	kc := newClient(t)
	ctx := ctxFor(t, 20*time.Second)
	n := newNode(t, kc, nil)
	old := pin.Pin{Member: "pinned-elsewhere", ClusterID: 0xc2, MemberID: 0xb, FirstSeenAt: time.Unix(20, 0).UTC(), SeenAt: time.Unix(20, 0).UTC()}
	if err := nodereport.WritePin(ctx, kc, n.Name, old); err != nil {
		t.Fatal(err)
	}
	if seen, err := nodereport.MemberPinnedAnywhere(ctx, kc, "pinned-elsewhere", 0xc1); err != nil || seen {
		t.Fatalf("another cluster's pin: seen %v err %v, want not seen", seen, err)
	}
	if seen, err := nodereport.MemberPinnedAnywhere(ctx, kc, "pinned-elsewhere", 0xc2); err != nil || !seen {
		t.Fatalf("its own cluster's pin: seen %v err %v, want seen", seen, err)
	}
	if seen, err := nodereport.MemberPinnedAnywhere(ctx, kc, "pinned-elsewhere", 0); err != nil || seen {
		t.Fatalf("no cluster ID known: seen %v err %v, want not seen", seen, err)
	}
}
