package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// TestAForceNewClusterRequestIsUsedOnlyOnItsSurvivorWithoutAQuorum: a
// person's request to start a pod member once with --force-new-cluster
// (the majority-lost restore) is used only on that member's own, pinned
// data, fresh, with no recovery open and no quorum seen; every other case
// is refused, with why, and the gate's own verdict stands.
func TestAForceNewClusterRequestIsUsedOnlyOnItsSurvivorWithoutAQuorum(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	pin := record.Pin{Member: "etcd-0", ClusterID: 0xc1, MemberID: 7, FirstSeenAt: time.Unix(1, 0)}
	noLeader := observation.Observation{ClusterID: 0xc1, Members: []observation.Member{
		{ID: 7, Name: "etcd-0", Serving: true}, {ID: 8, Name: "etcd-1"}, {ID: 9, Name: "etcd-2"}},
		Local: observation.Local{Match: observation.MatchOK, ID: 7}}
	unreachable := observation.Observation{MemberListError: "no endpoint answered"}
	withQuorum := observation.Observation{ClusterID: 0xc1, LeaderID: 8, Members: []observation.Member{
		{ID: 7, Name: "etcd-0"}, {ID: 8, Name: "etcd-1", Serving: true, IsLeader: true}, {ID: 9, Name: "etcd-2", Serving: true}}}
	ok := GateVerdict{Pass: true, Reason: GateDataDirOK, Detail: "data dir ok"}
	base := GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 7, Pin: pin, Obs: unreachable, Now: now}
	req := ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(-time.Minute)}
	for _, tc := range []struct {
		name  string
		edit  func(*GateInput, *GateVerdict, *ForceNewClusterRequest, *AgentWord, *bool)
		use   bool
		error string
	}{
		{"the survivor, no member answers: used", func(*GateInput, *GateVerdict, *ForceNewClusterRequest, *AgentWord, *bool) {}, true, ""},
		{"answers from another cluster: never", func(in *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			in.Obs.ForeignEndpoints = []string{"http://10.0.0.9:2379"}
		}, false, "another cluster"},
		{"the agent's report unreadable", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) {
			*a = AgentWord{Err: "no such file"}
		}, false, "cannot be read"},
		{"the agent's report old (is it running?)", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) {
			a.At = now.Add(-AgentWordFreshFor - time.Second)
		}, false, "is the node's agent running"},
		{"the agent sees a quorum", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) {
			a.MajorityLost = false
		}, false, "does not say the majority is lost"},
		{"not armed for a minute: the agent does not hold the cluster's Lease for it (another member's request may)", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) {
			a.Armed, a.UnarmedSince = nil, now.Add(-ForceArmWaitFor)
		}, false, "has not armed it"},
		{"armed for an earlier request, for a minute", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) {
			a.Armed.RequestedAt, a.UnarmedSince = a.Armed.RequestedAt.Add(-time.Minute), now.Add(-ForceArmWaitFor)
		}, false, "mark is for"},
		{"armed for another member, for a minute", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) {
			a.Armed.MemberID, a.UnarmedSince = 8, now.Add(-ForceArmWaitFor)
		}, false, "mark is for"},
		{"the mark outlived the agent's confirmation of its Lease, for a minute", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) {
			a.Armed.Until, a.UnarmedSince = now.Add(-time.Millisecond), now.Add(-ForceArmWaitFor)
		}, false, "valid until"},
		{"a learner (forced, it would drop every voter)", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) { a.Voter = false }, false, "as a voter"},
		{"the survivor, members answer without a leader: used", func(in *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			in.Obs = noLeader
		}, true, ""},
		{"a cluster with a quorum: never (it would split)", func(in *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			in.Obs = withQuorum
		}, false, "has a quorum"},
		{"the cluster not asked", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, asked *bool) {
			*asked = false
		}, false, "not asked"},
		{"a cluster with a quorum, the request not armed (yet): refused at once, etcd not held for the arm", func(in *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, _ *bool) {
			in.Obs, a.Armed, a.UnarmedSince = withQuorum, nil, time.Time{}
		}, false, "has a quorum"},
		{"the cluster not asked, the request not armed (yet): refused at once", func(_ *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, a *AgentWord, asked *bool) {
			*asked, a.Armed, a.UnarmedSince = false, nil, time.Time{}
		}, false, "not asked"},
		{"another member's ID", func(_ *GateInput, _ *GateVerdict, r *ForceNewClusterRequest, _ *AgentWord, _ *bool) { r.MemberID = 8 }, false, "not as the member named"},
		{"no member ID", func(_ *GateInput, _ *GateVerdict, r *ForceNewClusterRequest, _ *AgentWord, _ *bool) { r.MemberID = 0 }, false, "names no member ID"},
		{"never seen serving (no pin)", func(in *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			in.Pin = record.Pin{}
		}, false, "not as the member named"},
		{"the data dir another member's", func(in *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			in.DataDirMemberID = 9
		}, false, "member 9's"},
		{"a recovery open", func(in *GateInput, _ *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			in.Journal = record.Record{Phase: record.PhaseStopped}
		}, false, "recovery is open"},
		{"a stale request", func(_ *GateInput, _ *GateVerdict, r *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			r.RequestedAt = now.Add(-ForceNewClusterFreshFor - time.Second)
		}, false, "at most"},
		{"a request from the future", func(_ *GateInput, _ *GateVerdict, r *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			r.RequestedAt = now.Add(2 * time.Minute)
		}, false, "at most"},
		{"the gate holds (its data dir unusable)", func(_ *GateInput, v *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			*v = GateVerdict{Reason: GateDataDirUnusable, Detail: "corrupt"}
		}, false, "would not start"},
		{"the gate passes a prepared learner, not its own data", func(_ *GateInput, v *GateVerdict, _ *ForceNewClusterRequest, _ *AgentWord, _ *bool) {
			*v = GateVerdict{Pass: true, Reason: GatePrepared}
		}, false, "would not start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			armed := ForceArm{MemberID: req.MemberID, RequestedAt: req.RequestedAt, Holder: "node1/etcd-0/force-new-cluster", Until: now.Add(10 * time.Second)}
			in, v, r, a, asked := base, ok, req, AgentWord{At: now.Add(-20 * time.Second), MajorityLost: true, Voter: true, Armed: &armed}, true
			tc.edit(&in, &v, &r, &a, &asked)
			got, err := DecideForceNewCluster(in, v, r, a, asked)
			if got.ForcesNewCluster() != tc.use {
				t.Fatalf("forces = %v (%+v, %v), want %v", got.ForcesNewCluster(), got, err, tc.use)
			}
			if tc.use {
				if err != nil || got.Reason != GateForceNewCluster || !got.Until.Equal(a.Armed.Until) {
					t.Fatalf("used with %+v, %v", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.error) {
				t.Fatalf("error %v, want one saying %q", err, tc.error)
			}
			if got != v {
				t.Fatalf("a refused request changed the gate's verdict: %+v, want %+v", got, v)
			}
		})
	}
}

// TestAnUnarmedRequestHoldsTheStartAWhileThenIsRefused: a request the
// agent has not armed (yet) holds etcd, not used up at once: a poll late,
// a restarted agent or an API blip must not cost the person's request.
func TestAnUnarmedRequestHoldsTheStartAWhileThenIsRefused(t *testing.T) {
	now := time.Unix(2_000_000, 0)
	pin := record.Pin{Member: "etcd-0", ClusterID: 0xc1, MemberID: 7, FirstSeenAt: time.Unix(1, 0)}
	in := GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 7, Pin: pin, Obs: observation.Observation{MemberListError: "no endpoint answered"}, Now: now}
	ok := GateVerdict{Pass: true, Reason: GateDataDirOK}
	req := ForceNewClusterRequest{MemberID: 7, RequestedAt: now.Add(-time.Minute)}
	word := AgentWord{At: now, MajorityLost: true, Voter: true}
	for _, since := range []time.Time{{}, now.Add(-ForceArmWaitFor + time.Second)} {
		word.UnarmedSince = since
		v, err := DecideForceNewCluster(in, ok, req, word, true)
		if err != nil || !v.WaitsForArm() || v.Pass || !strings.Contains(v.Detail, "waits") {
			t.Fatalf("unarmed since %v: %+v, %v; want a hold for the arm", since, v, err)
		}
	}
	word.UnarmedSince = now.Add(-ForceArmWaitFor)
	if v, err := DecideForceNewCluster(in, ok, req, word, true); err == nil || v != ok {
		t.Fatalf("unarmed for %s: %+v, %v; want refused, the gate's verdict standing", ForceArmWaitFor, v, err)
	}
}
