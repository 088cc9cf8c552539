package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func list(since, seen int, ms ...invariant.Member) invariant.Membership {
	return invariant.Membership{Since: at(since), At: at(seen), Members: ms}
}

var (
	n1  = invariant.Member{ID: 0x1, Name: "node1"}
	n2  = invariant.Member{ID: 0x2, Name: "node2"}
	n3  = invariant.Member{ID: 0x3, Name: "node3"}
	n2b = invariant.Member{ID: 0x22, Name: "node2", Learner: true}
	n2v = invariant.Member{ID: 0x22, Name: "node2"}
)

// heal is node2 removed, re-added as a learner, promoted.
var heal = []invariant.Membership{
	list(0, 0, n1, n2, n3),
	list(10, 11, n1, n3),
	list(12, 13, n1, n3, n2b),
	list(20, 21, n1, n3, n2v),
}

func TestAuditPassesAHealUnderTheLease(t *testing.T) {
	lease := Tenures([]LeaseSample{
		{At: at(9), Holder: "node2/node2", Acquired: at(9), Renewed: at(9), Duration: 15 * time.Second},
		{At: at(20), Holder: "node2/node2", Acquired: at(9), Renewed: at(19), Duration: 15 * time.Second},
	})
	if v := AuditMembership(heal, lease, nil); len(v) != 0 {
		t.Fatalf("violations for a heal under the Lease: %v", v)
	}
	if c := Changes(heal); len(c) != 3 || !strings.HasPrefix(c[2].What[0], "promote 22") {
		t.Fatalf("changes: %+v", c)
	}
}

func TestAuditFindsAChangeWithoutTheLease(t *testing.T) {
	// Held until 9+15 = 24 s by the first tenure... then a change at 40 s.
	late := append(append([]invariant.Membership(nil), heal...), list(39, 40, n1, n3))
	lease := Tenures([]LeaseSample{{At: at(9), Holder: "a", Acquired: at(9), Renewed: at(9), Duration: 15 * time.Second}})
	v := AuditMembership(late, lease, nil)
	if len(v) != 1 || !strings.Contains(v[0], "remove 22") || !strings.Contains(v[0], "without the Lease") {
		t.Fatalf("want one change without the Lease (the remove at 40 s), got %v", v)
	}
}

func TestAuditFindsAnIDBackAfterItsRemoval(t *testing.T) {
	back := append(append([]invariant.Membership(nil), heal[:2]...), list(12, 13, n1, n2, n3))
	lease := []Tenure{{Holder: "a", From: at(0), To: at(100)}}
	v := AuditMembership(back, lease, nil)
	if len(v) != 1 || !strings.Contains(v[0], "member ID 2 (node2) in the member list again") {
		t.Fatalf("want the reused ID found, got %v", v)
	}
}

func TestAuditFindsTwoLearnersAndAChangeDuringAMajorityFault(t *testing.T) {
	two := []invariant.Membership{
		list(0, 0, n1, n2, n3),
		list(5, 6, n1, n2, n3, n2b, invariant.Member{ID: 0x33, Name: "node3", Learner: true}),
	}
	lease := []Tenure{{Holder: "a", From: at(0), To: at(100)}}
	v := AuditMembership(two, lease, []Window{{From: at(4), To: at(8), Episode: 3}})
	if len(v) != 2 || !strings.Contains(v[0], "2 learners at once") || !strings.Contains(v[1], "episode #3 held a majority down") {
		t.Fatalf("want two learners and a change in a majority window, got %v", v)
	}
}

func TestRemovedAtIsWhenTheListFirstLackedTheID(t *testing.T) {
	got := RemovedAt(heal)
	if len(got) != 1 || !got[0x2].Equal(at(11)) {
		t.Fatalf("RemovedAt = %v, want node2's 2 at 11 s", got)
	}
}

func TestTenuresEndAtExpiryAndAtRelease(t *testing.T) {
	ttl := 15 * time.Second
	// Held from 0, renewed at 0, expired at 15; the same holder takes it
	// again at 60, keeping its acquire time (client-go does).
	expired := Tenures([]LeaseSample{
		{At: at(1), Holder: "a", Acquired: at(0), Renewed: at(0), Duration: ttl},
		{At: at(61), Holder: "a", Acquired: at(0), Renewed: at(60), Duration: ttl},
	})
	if heldDuring(expired, at(29), at(30)) {
		t.Errorf("a change at 30 s counted as under the Lease that expired at 15 s: %+v", expired)
	}
	if !heldDuring(expired, at(61), at(62)) || !heldDuring(expired, at(5), at(6)) {
		t.Errorf("tenures %+v miss the holds at 5 s and 61 s", expired)
	}
	// Released (holder cleared) at 10.
	released := Tenures([]LeaseSample{
		{At: at(1), Holder: "a", Acquired: at(0), Renewed: at(5), Duration: ttl},
		{At: at(10), Holder: "", Acquired: at(0), Renewed: at(5), Duration: ttl},
	})
	if heldDuring(released, at(18), at(19)) {
		t.Errorf("a change 9 s after the release counted as under the Lease: %+v", released)
	}
}

// The first poll after a majority fault that sees the wiped member's heal
// has its Since inside the window; only changes seen inside it count.
func TestAChangeSeenAfterAMajorityWindowIsNotBlamedOnIt(t *testing.T) {
	h := []invariant.Membership{list(0, 0, n1, n2, n3), list(5, 30, n1, n3)}
	lease := []Tenure{{Holder: "a", From: at(0), To: at(100)}}
	if v := AuditMembership(h, lease, []Window{{From: at(6), To: at(20), Episode: 2}}); len(v) != 0 {
		t.Fatalf("a change seen 10 s after the window blamed on it: %v", v)
	}
}
