package plan

import (
	"strings"
	"testing"
	"time"
)

// TestTheAgentArmsOnlyARequestItsGateCouldUse: the agent takes the
// cluster's Lease for a --force-new-cluster request only where its own
// word would let the gate use it; it keeps the Lease after the use until
// the forced member serves with a quorum, and after a mark is set aside
// until the mark's time is over; every state that holds the Lease ends.
// One case per refusal.
func TestTheAgentArmsOnlyARequestItsGateCouldUse(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	req := ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(-time.Minute)}
	mark := ForceArm{MemberID: 7, RequestedAt: req.RequestedAt, Holder: "n1/etcd-0/force-new-cluster", Until: now.Add(5 * time.Second)}
	over := ForceArm{MemberID: 7, RequestedAt: req.RequestedAt, Until: now.Add(-ForceArmReleaseSlack - time.Millisecond)}
	other := ForceArm{MemberID: 7, RequestedAt: req.RequestedAt.Add(-time.Minute), Until: now.Add(time.Second)}
	base := ForceArmInput{Now: now, Request: &req, MajorityLost: true, Voter: true, MemberID: 7, ClusterID: 0xc1}
	stale := &ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(-ForceNewClusterFreshFor - time.Second)}
	for _, tc := range []struct {
		name string
		edit func(*ForceArmInput)
		want ForceArmAction
		why  string
	}{
		{"a fresh request of this voter, the majority lost: armed", func(*ForceArmInput) {}, ForceArmArm, "majority lost"},
		{"armed already: kept armed (the mark renewed)", func(in *ForceArmInput) { in.Mark, in.Live, in.Held = &mark, true, true }, ForceArmArm, ""},
		{"no request, no mark", func(in *ForceArmInput) { in.Request = nil }, ForceArmNothing, ""},
		{"another member's ID", func(in *ForceArmInput) { in.MemberID = 8 }, ForceArmNothing, "this agent's member is 8"},
		{"the member not known", func(in *ForceArmInput) { in.MemberID = 0 }, ForceArmNothing, "this agent's member is 0"},
		{"the cluster not known: no Lease", func(in *ForceArmInput) { in.ClusterID = 0 }, ForceArmNothing, "no Lease"},
		{"a stale request", func(in *ForceArmInput) { in.Request = stale }, ForceArmNothing, "at most"},
		{"a stale request, armed: the mark set aside, the Lease kept", func(in *ForceArmInput) { in.Request, in.Mark, in.Live = stale, &mark, true }, ForceArmDisarm, "at most"},
		{"a request from the future", func(in *ForceArmInput) {
			in.Request = &ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(2 * time.Minute)}
		},
			ForceArmNothing, "at most"},
		{"unreadable", func(in *ForceArmInput) { in.Request, in.RequestErr = nil, "bad json" }, ForceArmNothing, "bad json"},
		{"unreadable, armed: set aside", func(in *ForceArmInput) { in.Request, in.RequestErr, in.Mark, in.Live = nil, "bad json", &mark, true }, ForceArmDisarm, "bad json"},
		{"a recovery open", func(in *ForceArmInput) { in.JournalOpen = true }, ForceArmNothing, "recovery is open"},
		{"the agent sees a quorum", func(in *ForceArmInput) { in.MajorityLost = false }, ForceArmNothing, "does not see the majority lost"},
		{"the agent sees a quorum, armed: set aside", func(in *ForceArmInput) { in.MajorityLost, in.Mark, in.Live = false, &mark, true }, ForceArmDisarm, "majority lost"},
		{"a learner", func(in *ForceArmInput) { in.Voter = false }, ForceArmNothing, "as a voter"},
		{"withdrawn after it was armed: set aside", func(in *ForceArmInput) { in.Request, in.Mark, in.Live = nil, &mark, true }, ForceArmDisarm, "withdrawn or refused"},
		{"set aside, its time not over: the Lease kept", func(in *ForceArmInput) { in.Request, in.Mark = nil, &mark }, ForceArmWait, ""},
		{"set aside, its time over: let go", func(in *ForceArmInput) { in.Request, in.Mark = nil, &over }, ForceArmRelease, ""},
		{"a mark that cannot be set aside, its time over: let go (the gate takes it as none)", func(in *ForceArmInput) {
			in.Request, in.Mark, in.Live = nil, &over, true
		}, ForceArmRelease, ""},
		{"a mark valid further ahead than one is ever written (the clock stepped back): let go", func(in *ForceArmInput) {
			far := mark
			far.Until = now.Add(3 * time.Hour)
			in.Request, in.Mark = nil, &far
		}, ForceArmRelease, ""},
		{"held without a mark (a take whose fence failed): let go", func(in *ForceArmInput) { in.Request, in.Held = nil, true }, ForceArmRelease, ""},
		{"used, no quorum yet: held", func(in *ForceArmInput) { in.Request, in.Mark, in.UsedAt = nil, &mark, now.Add(-time.Minute) }, ForceArmHold, "held until"},
		{"used, long ago, no quorum yet: still held (no other member's request while it may start)", func(in *ForceArmInput) {
			in.Request, in.Mark, in.UsedAt = nil, &over, now.Add(-time.Hour)
		}, ForceArmHold, "held until"},
		{"used, a new request written: held, not armed", func(in *ForceArmInput) {
			in.Mark, in.UsedAt = &other, now.Add(-time.Second)
		}, ForceArmHold, "held until"},
		{"used, the forced member serves with a quorum: let go", func(in *ForceArmInput) {
			in.Request, in.Mark, in.UsedAt, in.MajorityLost = nil, &mark, now.Add(-time.Minute), false
		}, ForceArmRelease, "serves with a quorum"},
		{"another request's mark in force: the new one waits for its time", func(in *ForceArmInput) { in.Mark, in.Live = &other, true }, ForceArmDisarm, "in force until"},
		{"another request's mark set aside, its time not over: waits", func(in *ForceArmInput) { in.Mark = &other }, ForceArmWait, "in force until"},
		{"another request's mark, its time over: the new one armed", func(in *ForceArmInput) {
			o := other
			o.Until = over.Until
			in.Mark = &o
		}, ForceArmArm, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			tc.edit(&in)
			got := DecideForceArm(in)
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
	if mark.Arms(req, now.Add(-ForceArmMarkMaxAhead-time.Second)) {
		t.Fatal("a mark valid further ahead than a mark is ever written (the clock stepped back) arms")
	}
}
