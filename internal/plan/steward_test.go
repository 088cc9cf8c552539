package plan

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

func TestStewardFreesALostNodesMemberStepByStepAndRefusesOtherwise(t *testing.T) {
	now := time.Unix(10_000, 0)
	grace := 5 * time.Minute
	_ = now
	voter := func(id uint64, name string, serving bool) observation.Member {
		return observation.Member{ID: id, Name: name, PeerURLs: []string{"http://" + name + ":2380"}, ClientURLs: []string{"http://" + name + ":2379"}, Serving: serving}
	}
	obs := func(ms ...observation.Member) observation.Observation {
		o := observation.Observation{ClusterID: 0xc1, LeaderID: 1, Members: ms, Local: observation.Local{Match: observation.MatchOK, ID: 1, DataDirClass: "ok"}}
		return o
	}
	lostOne := obs(voter(1, "etcd-0", true), voter(2, "etcd-1", true), voter(3, "etcd-2", false))
	removed := obs(voter(1, "etcd-0", true), voter(2, "etcd-1", true))
	healthy := memberstate.Verdict{State: memberstate.Healthy}
	// claims: the data claim and PV on the lost node, and, given a second
	// pair of flags, a dedicated WAL claim on it too.
	claims := func(flags ...bool) []StewardClaim {
		var cs []StewardClaim
		for i, name := range []string{"data", "wal"}[:len(flags)/2] {
			cs = append(cs, StewardClaim{PVC: name + "-etcd-2", PV: "pv-" + name, PVExists: true, PVRetained: flags[2*i], Deleting: flags[2*i+1]})
		}
		return cs
	}
	// The base case: etcd-2's node has been NotReady with a stale node
	// Lease for longer than the grace, the member does not answer.
	base := StewardInput{Now: now, Obs: lostOne, Local: healthy, TargetName: "etcd-2", TargetPeerURLs: []string{"http://etcd-2:2380"},
		PodExists: true, PodNode: "node3", NodeExists: true, NodeReady: false, NodeLeaseStaleFor: grace + time.Second, TargetSilentFor: time.Minute,
		Claims: claims(false, false), ClusterID: 0xc1}
	marked := "c1/3"
	with := func(f func(*StewardInput)) StewardInput { in := base; f(&in); return in }
	for _, tc := range []struct {
		name   string
		in     StewardInput
		action Action
		reason Reason
	}{
		{"lost node, member silent: remove the member first", base, RemoveMember, ReasonNone},
		{"member removed by a steward: keep the old PV's data (Retain)", with(func(in *StewardInput) { in.Obs = removed; in.RemovedMark = marked }), StewardRetainPV, ReasonNone},
		{"PV retained: delete the claim (it waits on the pod)", with(func(in *StewardInput) { in.Obs = removed; in.RemovedMark = marked; in.Claims = claims(true, false) }), StewardDeletePVC, ReasonNone},
		{"claim deleting: force-delete the stuck pod", with(func(in *StewardInput) {
			in.Obs = removed
			in.RemovedMark = marked
			in.Claims = claims(true, true)
		}), StewardForceDeletePod, ReasonNone},
		{"claim gone: force-delete the stuck pod", with(func(in *StewardInput) { in.Obs = removed; in.RemovedMark = marked; in.Claims = nil }), StewardForceDeletePod, ReasonNone},
		// From issue 38: every node-local claim, each PV kept before any
		// claim goes, each claim before the pod.
		{"two local claims: the WAL claim's PV is kept too", with(func(in *StewardInput) {
			in.Obs, in.RemovedMark, in.Claims = removed, marked, claims(true, false, false, false)
		}), StewardRetainPV, ReasonNone},
		{"two local claims, both PVs kept: the data claim first", with(func(in *StewardInput) {
			in.Obs, in.RemovedMark, in.Claims = removed, marked, claims(true, false, true, false)
		}), StewardDeletePVC, ReasonNone},
		{"two local claims, the data claim deleting: the WAL claim next, not the pod", with(func(in *StewardInput) {
			in.Obs, in.RemovedMark, in.Claims = removed, marked, claims(true, true, true, false)
		}), StewardDeletePVC, ReasonNone},
		{"two local claims, both deleting: the pod", with(func(in *StewardInput) {
			in.Obs, in.RemovedMark, in.Claims = removed, marked, claims(true, true, true, true)
		}), StewardForceDeletePod, ReasonNone},
		{"pod gone (re-created, not bound yet): nothing left", with(func(in *StewardInput) { in.Obs = removed; in.PodNode = "" }), Nothing, ReasonNotNeeded},
		// From the review: "not in the list" is not "removed".
		{"not in the list and not marked (another cluster's pod, or gone otherwise): not ours", with(func(in *StewardInput) { in.Obs = removed }), Refuse, ReasonAmbiguousIdentity},
		{"marked by a steward of another cluster: not ours", with(func(in *StewardInput) { in.Obs = removed; in.RemovedMark = "c2/3" }), Refuse, ReasonAmbiguousIdentity},
		{"marked removed but still listed: not ours", with(func(in *StewardInput) { in.Obs = removed; in.RemovedMark = "c1/2" }), Refuse, ReasonAmbiguousIdentity},
		{"listed under its name with other peer URLs (a changed template): no guess", with(func(in *StewardInput) { in.TargetPeerURLs = []string{"http://new-etcd-2:2380"} }), Refuse, ReasonAmbiguousIdentity},
		{"node Lease seen unrenewed for less than the grace (our clock)", with(func(in *StewardInput) { in.NodeLeaseStaleFor = time.Minute }), Refuse, ReasonInGracePeriod},
		{"member silent for less than its grace (rule 6)", with(func(in *StewardInput) { in.TargetSilentFor = time.Second }), Refuse, ReasonInGracePeriod},
		{"node Ready: never touched", with(func(in *StewardInput) { in.NodeReady = true }), Refuse, ReasonNodeReady},
		{"node only cordoned (Ready): never touched, even after removal", with(func(in *StewardInput) { in.Obs = removed; in.NodeReady = true }), Refuse, ReasonNodeReady},

		{"NotReady for long but the member still serves (partitioned kubelet)", with(func(in *StewardInput) {
			in.Obs = obs(voter(1, "etcd-0", true), voter(2, "etcd-1", true), voter(3, "etcd-2", true))
		}), Refuse, ReasonMemberServing},
		{"its StatefulSet would re-create it without the start gate: nothing is touched", with(func(in *StewardInput) { in.TemplateUngated = "no gate" }), Refuse, ReasonNotGated},
		{"removed, but its StatefulSet lost the gate since: claim and pod stay", with(func(in *StewardInput) {
			in.Obs = removed
			in.RemovedMark = marked
			in.Claims = claims(true, false)
			in.TemplateUngated = "no gate"
		}), Refuse, ReasonNotGated},
		{"claim deleting, but the pod might come back ungated: the pod stays", with(func(in *StewardInput) {
			in.Obs = removed
			in.RemovedMark = marked
			in.Claims = claims(true, true)
			in.TemplateUngated = "rolling out"
		}), Refuse, ReasonNotGated},
		{"the steward's own member is not healthy", with(func(in *StewardInput) { in.Local = memberstate.Verdict{State: memberstate.Degraded} }), Refuse, ReasonStewardNotHealthy},
		{"majority lost: never", with(func(in *StewardInput) {
			in.Obs = obs(voter(1, "etcd-0", true), voter(2, "etcd-1", false), voter(3, "etcd-2", false))
		}), Refuse, ReasonMajorityLost},
		{"a learner is present: one change at a time", with(func(in *StewardInput) {
			l := voter(4, "etcd-3", false)
			l.IsLearner = true
			in.Obs = obs(voter(1, "etcd-0", true), voter(2, "etcd-1", true), voter(3, "etcd-2", false), l)
		}), Refuse, ReasonLearnerPresent},
		{"three of five voters silent: majority lost", with(func(in *StewardInput) {
			o := obs(voter(1, "etcd-0", true), voter(2, "etcd-1", true), voter(3, "etcd-2", false), voter(4, "etcd-3", false), voter(5, "etcd-4", false))
			o.Members[1].Serving = true
			in.Obs = o
		}), Refuse, ReasonMajorityLost},
		// From the review: a learner on a lost node (a rejoin whose node
		// died) would block every change for good.
		{"the target is a silent learner on the lost node: removed", with(func(in *StewardInput) {
			l := voter(3, "etcd-2", false)
			l.IsLearner = true
			in.Obs = obs(voter(1, "etcd-0", true), voter(2, "etcd-1", true), l)
		}), RemoveMember, ReasonNone},
		{"another member's learner is present: one change at a time", with(func(in *StewardInput) {
			l := voter(4, "etcd-9", false)
			l.IsLearner = true
			in.Obs = obs(voter(1, "etcd-0", true), voter(2, "etcd-1", true), voter(3, "etcd-2", false), l)
		}), Refuse, ReasonLearnerPresent},
	} {
		d := DecideSteward(tc.in, StewardConfig{NodeLostGrace: grace, MemberGrace: 3 * time.Second})
		if d.Action != tc.action || d.Reason != tc.reason {
			t.Errorf("%s: got %s/%s (%s), want %s/%s", tc.name, d.Action, d.Reason, d.Detail, tc.action, tc.reason)
		}
		if want := wantClaim(tc.in, tc.action); d.Claim != want {
			t.Errorf("%s: step on claim %q, want %q", tc.name, d.Claim, want)
		}
		if tc.action == RemoveMember && d.MemberID != 3 {
			t.Errorf("%s: removes %x, want 3", tc.name, d.MemberID)
		}
		// Every refusal is a known reason: its metric series exists at 0
		// from the start (alerts on increase() need it).
		if d.Action == Refuse && !slices.Contains(RefusalReasons(), d.Reason) {
			t.Errorf("%s: refusal reason %s is not in RefusalReasons()", tc.name, d.Reason)
		}
	}
}

// Rule 2 on its own: 4 voters, one lost, one more unhealthy: removing the
// lost one leaves 2 healthy of 3, quorum 2: allowed; with two unhealthy
// besides, majority is lost first.
func TestStewardRemovalKeepsAQuorumOfTheSmallerCluster(t *testing.T) {
	now := time.Unix(10_000, 0)
	m := func(id uint64, name string, serving bool) observation.Member {
		return observation.Member{ID: id, Name: name, PeerURLs: []string{"http://" + name + ":2380"}, Serving: serving}
	}
	// The local member serves but its data dir is gone: it is not healthy.
	o := observation.Observation{ClusterID: 1, LeaderID: 1, Members: []observation.Member{m(1, "a", true), m(2, "b", true), m(3, "c", true), m(4, "d", false)},
		Local: observation.Local{Match: observation.MatchOK, ID: 1, DataDirClass: "missing"}}
	in := StewardInput{Now: now, Obs: o, Local: memberstate.Verdict{State: memberstate.Healthy}, TargetName: "d", TargetPeerURLs: []string{"http://d:2380"},
		PodExists: true, PodNode: "n4", NodeExists: true, NodeLeaseStaleFor: time.Hour, TargetSilentFor: time.Hour, Claims: []StewardClaim{{PVC: "data-etcd-3", PV: "pv-3", PVExists: true}}}
	if d := DecideSteward(in, StewardConfig{NodeLostGrace: time.Minute}); d.Action != RemoveMember {
		t.Fatalf("2 healthy of 3 left, quorum 2: %s/%s %s", d.Action, d.Reason, d.Detail)
	}
	in.Obs.Members[1].Serving = false // now: a, c serve; a is not healthy: 1 healthy of 3 left
	in.Obs.LeaderID = 1
	if d := DecideSteward(in, StewardConfig{NodeLostGrace: time.Minute}); d.Reason != ReasonMajorityLost && d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("got %s/%s", d.Action, d.Reason)
	}
	in.Obs.Members[1].Serving = true
	in.Obs.Members[2].Serving = true
	in.Obs.Local.ID = 1
	o2 := in.Obs
	o2.Members = []observation.Member{m(1, "a", true), m(2, "b", true), m(3, "c", false), m(4, "d", false), m(5, "e", true)}
	in.Obs = o2 // 5 voters, 3 serve (a not healthy): 2 healthy of 4 left, quorum 3
	if d := DecideSteward(in, StewardConfig{NodeLostGrace: time.Minute}); d.Reason != ReasonWouldLoseQuorum {
		t.Fatalf("2 healthy of 4 left: got %s/%s %s", d.Action, d.Reason, d.Detail)
	}
}

// --auto-heal=false (a person is at work, as the manual procedures
// assume) and --dry-run: the steward says what it would do and does none
// of it, at every step.
func TestStewardNeverActsWithAutoHealOffOrInADryRun(t *testing.T) {
	voter := func(id uint64, name string, serving bool) observation.Member {
		return observation.Member{ID: id, Name: name, PeerURLs: []string{"http://" + name + ":2380"}, ClientURLs: []string{"http://" + name + ":2379"}, Serving: serving}
	}
	o := observation.Observation{ClusterID: 0xc1, LeaderID: 1, Members: []observation.Member{voter(1, "etcd-0", true), voter(2, "etcd-1", true), voter(3, "etcd-2", false)},
		Local: observation.Local{Match: observation.MatchOK, ID: 1, DataDirClass: "ok"}}
	removed := o
	removed.Members = o.Members[:2]
	in := StewardInput{Obs: o, Local: memberstate.Verdict{State: memberstate.Healthy}, TargetName: "etcd-2", TargetPeerURLs: []string{"http://etcd-2:2380"},
		PodExists: true, PodNode: "node3", NodeExists: true, NodeLeaseStaleFor: time.Hour, TargetSilentFor: time.Hour, Claims: []StewardClaim{{PVC: "data-etcd-2", PV: "pv-2", PVExists: true}}, ClusterID: 0xc1}
	afterRemoval := in
	afterRemoval.Obs, afterRemoval.RemovedMark = removed, "c1/3"
	for _, step := range []StewardInput{in, afterRemoval} {
		for _, tc := range []struct {
			cfg  StewardConfig
			want Reason
		}{{StewardConfig{NodeLostGrace: time.Minute, MemberGrace: time.Second, AutoHealOff: true}, ReasonAutoHealDisabled},
			{StewardConfig{NodeLostGrace: time.Minute, MemberGrace: time.Second, DryRun: true}, ReasonDryRun}} {
			d := DecideSteward(step, tc.cfg)
			if d.Action != Refuse || d.Reason != tc.want || !strings.Contains(d.Detail, "would") {
				t.Errorf("%+v: got %s/%s (%s), want a refusal %s saying what it would do", tc.cfg, d.Action, d.Reason, d.Detail, tc.want)
			}
			if !slices.Contains(RefusalReasons(), d.Reason) {
				t.Errorf("refusal reason %s is not in RefusalReasons() (its metric series is not made at 0)", d.Reason)
			}
		}
	}
}

// wantClaim is the claim a retain or delete step is about: the first whose
// PV is not kept, else the first not deleting.
func wantClaim(in StewardInput, a Action) string {
	for _, c := range in.Claims {
		if a == StewardRetainPV && !c.PVRetained || a == StewardDeletePVC && c.PVRetained && !c.Deleting && allKept(in.Claims) {
			return c.PVC
		}
	}
	return ""
}

func allKept(cs []StewardClaim) bool {
	for _, c := range cs {
		if !c.PVRetained {
			return false
		}
	}
	return true
}

// The steward removes a lost node's member only if the pod its StatefulSet
// re-creates runs an etcd the cluster takes after the removal (review: a
// node lost mid-rollout, its member on 3.5, the others on 3.6: removing it
// raises the cluster version to 3.6 and the re-created 3.5 learner never
// starts). Its own steward member stays in the cluster and counts.
func TestStewardRemovalFollowsTheVersionRule(t *testing.T) {
	m := func(id uint64, name, v string, serving bool) observation.Member {
		return observation.Member{ID: id, Name: name, PeerURLs: []string{"http://" + name + ":2380"}, Serving: serving, Version: v}
	}
	o := observation.Observation{ClusterID: 1, LeaderID: 1, ClusterVersion: "3.5.0",
		Members: []observation.Member{m(1, "a", "3.6.16", true), m(2, "b", "3.6.16", true), m(3, "c", "", false)},
		Local:   observation.Local{Match: observation.MatchOK, ID: 1, DataDirClass: "ok", Serving: true}}
	in := StewardInput{Now: time.Unix(10_000, 0), Obs: o, Local: memberstate.Verdict{State: memberstate.Healthy}, TargetName: "c", TargetPeerURLs: []string{"http://c:2380"},
		PodExists: true, PodNode: "n3", NodeExists: true, NodeLeaseStaleFor: time.Hour, TargetSilentFor: time.Hour,
		Claims: []StewardClaim{{PVC: "data-etcd-2", PV: "pv-2", PVExists: true}}}
	for v, want := range map[string]Action{"3.5.36": Refuse, "3.6.16": RemoveMember, "": Refuse} {
		in.LearnerVersion = v
		if d := DecideSteward(in, StewardConfig{NodeLostGrace: time.Minute}); d.Action != want {
			t.Fatalf("re-created pod on %q: %s/%s %s, want %s", v, d.Action, d.Reason, d.Detail, want)
		}
	}
}
