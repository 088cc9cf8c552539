package plan

import (
	"strings"
	"testing"
	"time"
)

// TestTheAgentArmsOnlyARequestItsGateCouldUse: the agent takes the
// cluster's Lease for a --force-new-cluster request only where its own
// word would let the gate use it; it keeps the Lease after the use until
// the forced member serves with a quorum (bounded), and lets go of it at
// once when the request goes unused. One case per refusal.
func TestTheAgentArmsOnlyARequestItsGateCouldUse(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	req := ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(-time.Minute)}
	mark := ForceArm{MemberID: 7, RequestedAt: req.RequestedAt, Holder: "n1/etcd-0/force-new-cluster", Until: now.Add(5 * time.Second)}
	base := ForceArmInput{Now: now, Request: &req, MajorityLost: true, Voter: true, MemberID: 7, ClusterID: 0xc1}
	for _, tc := range []struct {
		name string
		edit func(*ForceArmInput)
		want ForceArmAction
		why  string
	}{
		{"a fresh request of this voter, the majority lost: armed", func(*ForceArmInput) {}, ForceArmArm, "majority lost"},
		{"armed already: kept armed (the mark renewed)", func(in *ForceArmInput) { in.Armed = &mark }, ForceArmArm, ""},
		{"no request, no mark", func(in *ForceArmInput) { in.Request = nil }, ForceArmNothing, ""},
		{"another member's ID", func(in *ForceArmInput) { in.MemberID = 8 }, ForceArmNothing, "this agent's member is 8"},
		{"the member not known", func(in *ForceArmInput) { in.MemberID = 0 }, ForceArmNothing, "this agent's member is 0"},
		{"the cluster not known: no Lease", func(in *ForceArmInput) { in.ClusterID = 0 }, ForceArmNothing, "no Lease"},
		{"a stale request", func(in *ForceArmInput) {
			in.Request = &ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(-ForceNewClusterFreshFor - time.Second)}
		},
			ForceArmNothing, "at most"},
		{"a stale request, armed: disarmed", func(in *ForceArmInput) {
			in.Request = &ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(-ForceNewClusterFreshFor - time.Second)}
			in.Armed = &mark
		}, ForceArmDisarm, "at most"},
		{"a request from the future", func(in *ForceArmInput) {
			in.Request = &ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(2 * time.Minute)}
		},
			ForceArmNothing, "at most"},
		{"unreadable", func(in *ForceArmInput) { in.Request, in.RequestErr = nil, "bad json" }, ForceArmNothing, "bad json"},
		{"unreadable, armed: disarmed", func(in *ForceArmInput) { in.Request, in.RequestErr, in.Armed = nil, "bad json", &mark }, ForceArmDisarm, "bad json"},
		{"a recovery open", func(in *ForceArmInput) { in.JournalOpen = true }, ForceArmNothing, "recovery is open"},
		{"the agent sees a quorum", func(in *ForceArmInput) { in.MajorityLost = false }, ForceArmNothing, "does not see the majority lost"},
		{"the agent sees a quorum, armed: disarmed", func(in *ForceArmInput) { in.MajorityLost, in.Armed = false, &mark }, ForceArmDisarm, "majority lost"},
		{"a learner", func(in *ForceArmInput) { in.Voter = false }, ForceArmNothing, "as a voter"},
		{"withdrawn or refused after it was armed: disarmed at once", func(in *ForceArmInput) { in.Request, in.Armed = nil, &mark }, ForceArmDisarm, "withdrawn or refused"},
		{"used, the forced member not serving with a quorum yet: held", func(in *ForceArmInput) {
			in.Request, in.Armed, in.UsedAt = nil, &mark, now.Add(-time.Minute)
		}, ForceArmHold, "held until"},
		{"used, the forced member serves with a quorum: disarmed", func(in *ForceArmInput) {
			in.Request, in.Armed, in.UsedAt, in.MajorityLost = nil, &mark, now.Add(-time.Minute), false
		}, ForceArmDisarm, "serves with a quorum"},
		{"used, no quorum long after: disarmed (bounded)", func(in *ForceArmInput) {
			in.Request, in.Armed, in.UsedAt = nil, &mark, now.Add(-ForceArmHoldAfterUse-time.Second)
		}, ForceArmDisarm, "does not serve"},
		{"a mark removed, its time not over: the Lease kept", func(in *ForceArmInput) {
			in.Request, in.Disarmed = nil, &mark
		}, ForceArmNothing, ""},
		{"a mark removed, its time over: the Lease let go", func(in *ForceArmInput) {
			in.Request, in.Disarmed = nil, &ForceArm{MemberID: 7, Until: now.Add(-ForceArmReleaseSlack - time.Millisecond)}
		}, ForceArmRelease, ""},
		{"a mark removed as the gate used its request: the hold restored", func(in *ForceArmInput) {
			in.Request, in.Disarmed, in.DisarmedUsedAt = nil, &mark, now.Add(-time.Second)
		}, ForceArmRestoreHold, "as its mark was removed"},
		{"a mark removed, a new request armed: armed (the Lease kept)", func(in *ForceArmInput) {
			in.Disarmed = &ForceArm{MemberID: 7, Until: now.Add(-time.Hour)}
		}, ForceArmArm, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			tc.edit(&in)
			got := DecideForceArm(in)
			if got.ReleaseNow != (got.Action == ForceArmDisarm && in.Request == nil && !in.UsedAt.IsZero()) {
				t.Fatalf("got %+v: a Lease is let go at once only after the hold of a used request", got)
			}
			if got.Action != tc.want || !strings.Contains(got.Why, tc.why) {
				t.Fatalf("got %+v, want action %d saying %q", got, tc.want, tc.why)
			}
		})
	}
}

// TestAMarkArmsOnlyItsRequestUntilItsTime: the gate's check of the mark.
func TestAMarkArmsOnlyItsRequestUntilItsTime(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	req := ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(-time.Minute)}
	mark := ForceArm{MemberID: 7, RequestedAt: req.RequestedAt.In(time.FixedZone("x", 3600)), Until: now}
	if !mark.Arms(req, now) {
		t.Fatal("the mark of the request, at its last valid instant, does not arm it")
	}
	if mark.Arms(req, now.Add(time.Nanosecond)) {
		t.Fatal("an expired mark arms")
	}
	if mark.Arms(ForceNewClusterRequest{MemberID: 8, RequestedAt: req.RequestedAt}, now) {
		t.Fatal("a mark arms another member's request")
	}
}
