package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// The start gate's rules, one row each (docs/recovery.md "The start gate").
func TestStartGate(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	seen := record.Pin{Member: "node2", ClusterID: 0xc1, MemberID: 7, FirstSeenAt: time.Unix(1, 0)}
	started := observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 7, Name: "node2", ClientURLs: []string{"http://x"}}},
		Local: observation.Local{Match: observation.MatchOK, ID: 7}}
	neverStarted := observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 9}},
		Local: observation.Local{Match: observation.MatchOK, ID: 9}}
	learnerStarted := observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 9, Name: "node2", ClientURLs: []string{"http://x"}, IsLearner: true}},
		Local: observation.Local{Match: observation.MatchOK, ID: 9}}
	notMember := observation.Observation{ClusterID: 0xc1, Local: observation.Local{Match: observation.MatchNotFound}}
	ambiguous := observation.Observation{ClusterID: 0xc1, Local: observation.Local{Match: observation.MatchAmbiguous}}
	unreachable := observation.Observation{MemberListError: "no endpoint answered", Local: observation.Local{Match: observation.MatchNotFound}}
	prepared := record.Record{Phase: record.PhasePrepared, NewMemberID: 9}
	learnerRan := record.Record{Phase: record.PhaseMemberStarted, NewMemberID: 9}
	removed := record.Record{Phase: record.PhaseRemoved, OldMemberID: 7}
	healed := record.Record{Phase: record.PhaseDone, Result: record.ResultSucceeded, NewMemberID: 9}
	failedSeed := record.Record{Phase: record.PhaseDone, Result: record.ResultFailed, NewMemberID: 9}
	for _, tc := range []struct {
		name string
		in   GateInput
		pass bool
		want Reason
	}{
		{"held by the agent (pod runtime): a healthy data dir of its own holds too", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 7, Pin: seen, Obs: started, HeldByAgent: "stopped for a rejoin"}, false, GateHeldByAgent},
		{"held by the agent: a prepared data dir holds until released", GateInput{DataDirClass: "missing", Pin: seen, Journal: prepared, Obs: neverStarted, HeldByAgent: "stopped for a rejoin"}, false, GateHeldByAgent},
		{"healthy data dir of the pinned member passes", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 7, Pin: seen, Obs: started}, true, GateDataDirOK},
		{"healthy data dir of a never-seen member passes", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 5, Obs: unreachable}, true, GateDataDirOK},
		{"healthy data dir of the learner a recovery prepared passes", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 9, Pin: seen, Journal: prepared, Obs: started}, true, GateDataDirOK},
		{"data dir of the learner of a successful recovery passes before the pin moves on", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 9, Pin: seen, Journal: healed, Obs: started}, true, GateDataDirOK},
		{"data dir of a learner a failed recovery removed holds", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 9, Pin: seen, Journal: failedSeed, Obs: started}, false, GateIdentityMismatch},
		{"data dir of another member holds", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 5, Pin: seen, Obs: started}, false, GateIdentityMismatch},
		{"ok layout whose check was interrupted holds", GateInput{DataDirClass: "ok", DataDirMemberID: 0, Pin: seen, Obs: started}, false, GateUnverified},
		{"member replaced by hand (new ID listed under our name and peer URL) passes", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 9, Pin: seen,
			Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 9, Name: "node2", ClientURLs: []string{"http://x"}}}, Local: observation.Local{Match: observation.MatchOK, ID: 9}}}, true, GateDataDirOK},
		{"member listed under our name in another cluster does not excuse a foreign ID", GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 9, Pin: seen,
			Obs: observation.Observation{ClusterID: 0xc2, Members: []observation.Member{{ID: 9, Name: "node2", ClientURLs: []string{"http://x"}}}, Local: observation.Local{Match: observation.MatchOK, ID: 9}}}, false, GateIdentityMismatch},
		{"bootstrap flags, the cluster exists and lists others: holds (a fresh cluster under the old IDs)", GateInput{DataDirClass: "missing", Obs: notMember, Bootstrap: true, InitialClusterPeers: []string{"http://p2"}}, false, GateWouldBootstrap},
		{"bootstrap flags naming only itself, a new member ID added by hand: holds", GateInput{DataDirClass: "empty", Pin: seen, Obs: neverStarted, Bootstrap: true, InitialClusterPeers: []string{"http://p9"}}, false, GateWouldBootstrap},
		{"bootstrap flags, the cluster's first start, this member not started yet: passes", GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p9"},
			Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}}, {ID: 9, PeerURLs: []string{"http://p9"}}},
				Local: observation.Local{Match: observation.MatchOK, ID: 9}}}, true, GateNeverSeen},
		{"bootstrap flags, first start of the cluster, this member named by --initial-cluster but not started yet: passes", GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p9"},
			Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}}, {ID: 9, Name: "node2", PeerURLs: []string{"http://p9"}}},
				Local: observation.Local{Match: observation.MatchOK, ID: 9}}}, true, GateNeverSeen},
		{"bootstrap flags, a learner added (by hand) under this member's peer URL to the cluster --initial-cluster describes: holds (a learner is never an initial member; with new it would start under the derived, old member ID)",
			GateInput{DataDirClass: "empty", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p3", "http://p9"},
				Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}},
					{ID: 3, Name: "node3", PeerURLs: []string{"http://p3"}, ClientURLs: []string{"http://c3"}}, {ID: 9, PeerURLs: []string{"http://p9"}, IsLearner: true}},
					Local: observation.Local{Match: observation.MatchOK, ID: 9}}}, false, GateWouldBootstrap},
		{"bootstrap flags, a learner added by hand, start-flags.json naming it with existing: starts with those flags (UC3 by hand, a StatefulSet member)",
			GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p3", "http://p9"},
				StartFlagsInitialCluster: "node1=http://p1,node3=http://p3,etcd-1=http://p9", Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}},
					{ID: 3, Name: "node3", PeerURLs: []string{"http://p3"}, ClientURLs: []string{"http://c3"}}, {ID: 9, PeerURLs: []string{"http://p9"}, IsLearner: true}},
					Local: observation.Local{Match: observation.MatchOK, ID: 9, Name: "etcd-1", PeerURLs: []string{"http://p9"}}}}, true, GateLearnerStartFlags},
		{"bootstrap flags, a learner added by hand, start-flags.json not naming its peer URL: holds",
			GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p3", "http://p9"},
				StartFlagsInitialCluster: "node1=http://p1,node3=http://p3", Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}},
					{ID: 3, Name: "node3", PeerURLs: []string{"http://p3"}, ClientURLs: []string{"http://c3"}}, {ID: 9, PeerURLs: []string{"http://p9"}, IsLearner: true}},
					Local: observation.Local{Match: observation.MatchOK, ID: 9, Name: "etcd-1", PeerURLs: []string{"http://p9"}}}}, false, GateWouldBootstrap},
		{"start-flags.json listing this member's peer URL under another name: holds (etcd would take that member's ID)",
			GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p3", "http://p9"},
				StartFlagsInitialCluster: "node1=http://p9,etcd-1=http://p1,node3=http://p3", Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}},
					{ID: 3, Name: "node3", PeerURLs: []string{"http://p3"}, ClientURLs: []string{"http://c3"}}, {ID: 9, PeerURLs: []string{"http://p9"}, IsLearner: true}},
					Local: observation.Local{Match: observation.MatchOK, ID: 9, Name: "etcd-1", PeerURLs: []string{"http://p9"}}}}, false, GateWouldBootstrap},
		{"start-flags.json listing this member's peer URL under its name and another's: holds",
			GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p3", "http://p9"},
				StartFlagsInitialCluster: "node1=http://p1,node3=http://p3,etcd-1=http://p9,node4=http://p9", Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}},
					{ID: 3, Name: "node3", PeerURLs: []string{"http://p3"}, ClientURLs: []string{"http://c3"}}, {ID: 9, PeerURLs: []string{"http://p9"}, IsLearner: true}},
					Local: observation.Local{Match: observation.MatchOK, ID: 9, Name: "etcd-1", PeerURLs: []string{"http://p9"}}}}, false, GateWouldBootstrap},
		{"a stale start-flags.json (its peers are not the cluster's now): holds",
			GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p3", "http://p9"},
				StartFlagsInitialCluster: "node1=http://p1,node2=http://p2,etcd-1=http://p9", Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}},
					{ID: 3, Name: "node3", PeerURLs: []string{"http://p3"}, ClientURLs: []string{"http://c3"}}, {ID: 9, PeerURLs: []string{"http://p9"}, IsLearner: true}},
					Local: observation.Local{Match: observation.MatchOK, ID: 9, Name: "etcd-1", PeerURLs: []string{"http://p9"}}}}, false, GateWouldBootstrap},
		{"start-flags.json while an agent's recovery of this member is open below prepared: holds (the agent owns the start)",
			GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p3", "http://p9"}, Journal: record.Record{Phase: record.PhaseStarted},
				StartFlagsInitialCluster: "node1=http://p1,node3=http://p3,etcd-1=http://p9", Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}},
					{ID: 3, Name: "node3", PeerURLs: []string{"http://p3"}, ClientURLs: []string{"http://c3"}}, {ID: 9, PeerURLs: []string{"http://p9"}, IsLearner: true}},
					Local: observation.Local{Match: observation.MatchOK, ID: 9, Name: "etcd-1", PeerURLs: []string{"http://p9"}}}}, false, GateWouldBootstrap},
		{"start-flags.json over a member that started before: holds (only a never-started learner takes them)",
			GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p9"}, StartFlagsInitialCluster: "node1=http://p1,node2=http://p9",
				Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}}, {ID: 9, Name: "node2", PeerURLs: []string{"http://p9"}, ClientURLs: []string{"http://c9"}, IsLearner: true}},
					Local: observation.Local{Match: observation.MatchOK, ID: 9, Name: "etcd-1", PeerURLs: []string{"http://p9"}}}}, false, GateWouldBootstrap},
		{"bootstrap flags, first start of the cluster, but this member ran before: holds", GateInput{DataDirClass: "missing", Bootstrap: true, InitialClusterPeers: []string{"http://p1", "http://p9"},
			Obs: observation.Observation{ClusterID: 0xc1, Members: []observation.Member{{ID: 1, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}}, {ID: 9, Name: "node2", PeerURLs: []string{"http://p9"}, ClientURLs: []string{"http://c9"}}},
				Local: observation.Local{Match: observation.MatchOK, ID: 9}}}, false, GateWouldBootstrap},
		{"prepared, but the learner already published (agent killed before recording the start): holds", GateInput{DataDirClass: "missing", Pin: seen, Journal: prepared, Obs: learnerStarted}, false, GateMemberExisted},
		{"corrupt data dir holds even when not a member", GateInput{DataDirClass: "corrupt", Obs: notMember}, false, GateDataDirUnusable},
		{"foreign data dir holds", GateInput{DataDirClass: "foreign", Obs: notMember}, false, GateDataDirUnusable},
		{"a file in place of the data dir holds, never bootstraps (issue 38)", GateInput{DataDirClass: "not-a-directory", DataDirVerified: true, Obs: unreachable, Bootstrap: true}, false, GateDataDirUnusable},
		{"a file in place of the data dir holds for a never-started member", GateInput{DataDirClass: "not-a-directory", Obs: notMember}, false, GateDataDirUnusable},
		{"stale (restored) data dir holds", GateInput{DataDirClass: "stale", DataDirVerified: true, Obs: notMember}, false, GateDataDirUnusable},
		{"data dir in use holds", GateInput{DataDirClass: "in-use", Pin: seen, Obs: started}, false, GateDataDirUnusable},
		{"unreadable pin holds", GateInput{DataDirClass: "missing", PinError: "bad json", Obs: notMember, Bootstrap: true}, false, GatePinUnreadable},
		{"empty data dir under the old member ID holds", GateInput{DataDirClass: "empty", Pin: seen, Obs: started}, false, GateMemberExisted},
		{"missing data dir under the old member ID holds while a recovery removes it", GateInput{DataDirClass: "missing", Pin: seen, Journal: removed, Obs: started}, false, GateMemberExisted},
		{"missing data dir of a started member holds without a pin", GateInput{DataDirClass: "missing", Obs: started}, false, GateMemberExisted},
		{"pinned member, cluster unreachable, bootstrap flags: holds (power event)", GateInput{DataDirClass: "missing", Pin: seen, Obs: unreachable, Bootstrap: true}, false, GateClusterUnknown},
		{"pinned single member, data dir lost: holds", GateInput{DataDirClass: "empty", Pin: seen, Obs: unreachable}, false, GateClusterUnknown},
		{"never-seen member, cluster unreachable, bootstrap flags: bootstraps", GateInput{DataDirClass: "missing", Obs: unreachable, Bootstrap: true}, true, GateNeverSeen},
		{"pod member, no word from the agent, cluster unreachable, bootstrap flags: holds", GateInput{DataDirClass: "missing", Obs: unreachable, Bootstrap: true,
			AdmissionRequired: true, Now: now}, false, GateAwaitingAgent},
		{"pod member, its cluster served per the record, cluster unreachable: holds", GateInput{DataDirClass: "empty", Obs: unreachable, Bootstrap: true,
			AdmissionRequired: true, Admission: record.Admission{ClusterSeen: true, ClusterID: 0xc1, CheckedAt: now}, Now: now}, false, GateClusterUnknown},
		{"pod member, a stale word that the cluster never served: holds", GateInput{DataDirClass: "missing", Obs: unreachable, Bootstrap: true,
			AdmissionRequired: true, Admission: record.Admission{CheckedAt: now.Add(-AdmissionFreshFor - time.Second)}, Now: now}, false, GateAwaitingAgent},
		{"pod member, an unreadable word: holds", GateInput{DataDirClass: "missing", Obs: unreachable, Bootstrap: true,
			AdmissionRequired: true, AdmissionError: "bad json", Now: now}, false, GateAwaitingAgent},
		{"pod member, a fresh word that the cluster never served: bootstraps", GateInput{DataDirClass: "missing", Obs: unreachable, Bootstrap: true,
			AdmissionRequired: true, Admission: record.Admission{CheckedAt: now.Add(-time.Second)}, Now: now}, true, GateNeverSeen},
		{"pod member, no word, but the cluster answers that it never started: passes", GateInput{DataDirClass: "empty", Obs: neverStarted,
			AdmissionRequired: true, Now: now}, true, GateNeverStarted},
		{"no quorum, but a peer's own member list shows this member started: holds (review 9)", GateInput{DataDirClass: "missing", Bootstrap: true,
			Obs: observation.Observation{MemberListError: "no leader", Members: []observation.Member{{ID: 7, Name: "node2", PeerURLs: []string{"http://p2"}, ClientURLs: []string{"http://c2"}}},
				Local: observation.Local{Name: "node2", PeerURLs: []string{"http://p2"}}},
			AdmissionRequired: true, Admission: record.Admission{CheckedAt: now}, Now: now}, false, GateMemberExisted},
		{"no quorum, a peer's list of this cluster shows this member under its name only (a new pod IP): holds", GateInput{DataDirClass: "missing", Bootstrap: true,
			InitialClusterPeers: []string{"http://p1", "http://p2"},
			Obs: observation.Observation{MemberListError: "no leader", Members: []observation.Member{{ID: 7, Name: "node2", PeerURLs: []string{"http://old"}, ClientURLs: []string{"http://c2"}},
				{ID: 6, Name: "node1", PeerURLs: []string{"http://p1"}, ClientURLs: []string{"http://c1"}}},
				Local: observation.Local{Name: "node2", PeerURLs: []string{"http://p2"}}}}, false, GateMemberExisted},
		{"no quorum, another cluster's list has a started member of this name (review 10): bootstraps", GateInput{DataDirClass: "missing", Bootstrap: true,
			InitialClusterPeers: []string{"http://p1", "http://p2"},
			Obs: observation.Observation{MemberListError: "no leader", ClusterID: 0xf00, Members: []observation.Member{{ID: 7, Name: "node2", PeerURLs: []string{"http://10.9.9.9"}, ClientURLs: []string{"http://c2"}}},
				Local: observation.Local{Name: "node2", PeerURLs: []string{"http://p2"}}}}, true, GateNeverSeen},
		{"pod member, an admission from the future: holds", GateInput{DataDirClass: "missing", Obs: unreachable, Bootstrap: true,
			AdmissionRequired: true, Admission: record.Admission{CheckedAt: now.Add(time.Hour)}, Now: now}, false, GateAwaitingAgent},
		{"never-seen member, cluster unreachable, existing: holds", GateInput{DataDirClass: "missing", Obs: unreachable}, false, GateClusterUnknown},
		{"data dir the agent prepared passes", GateInput{DataDirClass: "empty", Pin: seen, Journal: prepared, Obs: unreachable}, true, GatePrepared},
		{"learner started by the recovery but never published passes", GateInput{DataDirClass: "missing", Pin: seen, Journal: learnerRan, Obs: neverStarted}, true, GatePrepared},
		{"learner that ran and lost its data dir holds", GateInput{DataDirClass: "missing", Pin: seen, Journal: learnerRan, Obs: learnerStarted}, false, GateMemberExisted},
		{"learner past prepared with the cluster unreachable holds", GateInput{DataDirClass: "missing", Pin: seen, Journal: learnerRan, Obs: unreachable}, false, GateMemberExisted},
		{"new member ID added by hand, never started, passes", GateInput{DataDirClass: "empty", Pin: seen, Obs: neverStarted}, true, GateNeverStarted},
		{"member added but never started passes", GateInput{DataDirClass: "empty", Obs: neverStarted}, true, GateNeverStarted},
		{"not a member passes (etcd itself refuses to join)", GateInput{DataDirClass: "empty", Obs: notMember}, true, GateNotMember},
		{"ambiguous identity holds", GateInput{DataDirClass: "empty", Obs: ambiguous}, false, GateIdentityMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := DecideGate(tc.in)
			if v.Pass != tc.pass || v.Reason != tc.want {
				t.Fatalf("pass=%v reason=%s (%s), want pass=%v reason=%s", v.Pass, v.Reason, v.Detail, tc.pass, tc.want)
			}
			if v.Detail == "" {
				t.Fatal("every gate verdict says why")
			}
		})
	}
}

func TestPinnedClusterUnreachableSaysRestoreIsAHumansCall(t *testing.T) {
	v := DecideGate(GateInput{DataDirClass: "missing", Pin: record.Pin{Member: "m", ClusterID: 1, MemberID: 2},
		Obs: observation.Observation{MemberListError: "x"}, Bootstrap: true})
	if v.Pass || !strings.Contains(v.Detail, "restoring from a backup is a human's call") {
		t.Fatalf("%+v", v)
	}
}

func TestPinIsTakenWhenTheMemberServesAndFollowsItsNewIDButNeverAnotherCluster(t *testing.T) {
	now := time.Unix(100, 0)
	serving := observation.Observation{ClusterID: 0xc1, Local: observation.Local{Match: observation.MatchOK, ID: 7, Serving: true,
		AnsweringID: 7, AnsweringClusterID: 0xc1, DataDirClass: "in-use", PeerURLs: []string{"http://p"}}}
	p, changed := NextPin(record.Pin{}, "node2", serving, now)
	if !changed || uint64(p.ClusterID) != 0xc1 || uint64(p.MemberID) != 7 || p.Member != "node2" || !p.FirstSeenAt.Equal(now) {
		t.Fatalf("first sight: %+v changed=%v", p, changed)
	}
	if _, changed := NextPin(p, "node2", serving, now.Add(time.Second)); changed {
		t.Fatal("the same sight changes nothing")
	}
	// From the review of issue 14's round: a routine poll that reused the
	// last full probe (no request) neither sets nor moves a pin; only an
	// observation that asked the member does.
	reused := serving
	reused.PeersReused = true
	if _, changed := NextPin(record.Pin{}, "node2", reused, now); changed {
		t.Fatal("a reused probe set a pin")
	}
	moved := reused
	moved.Local.ID, moved.Local.AnsweringID = 8, 8
	if _, changed := NextPin(p, "node2", moved, now); changed {
		t.Fatal("a reused probe moved a pin")
	}
	learner := serving
	learner.Local.ID, learner.Local.AnsweringID, learner.Local.IsLearner = 9, 9, true
	if _, changed := NextPin(record.Pin{}, "node2", learner, now); changed {
		t.Fatal("a learner is pinned: a failed heal removes it again")
	}
	for name, o := range map[string]observation.Observation{
		"not serving":          {ClusterID: 0xc1, Local: observation.Local{Match: observation.MatchOK, ID: 8, DataDirClass: "ok"}},
		"not matched":          {ClusterID: 0xc1, Local: observation.Local{Match: observation.MatchAmbiguous, ID: 8, Serving: true, DataDirClass: "ok"}},
		"data dir wiped":       {ClusterID: 0xc1, Local: observation.Local{Match: observation.MatchOK, ID: 8, Serving: true, DataDirClass: "missing"}},
		"no linearizable list": {ClusterID: 0xc1, MemberListError: "x", Local: observation.Local{Match: observation.MatchOK, ID: 8, Serving: true, DataDirClass: "ok"}},
		"another cluster":      {ClusterID: 0xc2, Local: observation.Local{Match: observation.MatchOK, ID: 8, Serving: true, AnsweringID: 8, AnsweringClusterID: 0xc2, DataDirClass: "ok"}},
		"not what answers":     {ClusterID: 0xc1, Local: observation.Local{Match: observation.MatchOK, ID: 8, Serving: true, AnsweringID: 5, AnsweringClusterID: 0xc1, DataDirClass: "ok"}},
	} {
		if got, changed := NextPin(p, "node2", o, now); changed || got.MemberID != p.MemberID || got.ClusterID != p.ClusterID {
			t.Fatalf("%s: pin moved to %+v", name, got)
		}
	}
	rejoined := serving
	rejoined.Local.ID, rejoined.Local.AnsweringID = 9, 9
	q, changed := NextPin(p, "node2", rejoined, now.Add(time.Minute))
	if !changed || uint64(q.MemberID) != 9 || uint64(q.ClusterID) != 0xc1 || !q.FirstSeenAt.Equal(now) {
		t.Fatalf("after a rejoin: %+v changed=%v", q, changed)
	}
}

// A pod member's state dir without a pin (a new node or claim: a PVC
// restored from a volume snapshot is one) may start on a healthy data dir
// of its own only after the agent has read the member's record, whose pin
// (and high-water mark) it writes to the state dir first (issue 15 review).
func TestAnUnpinnedPodMemberStartsOnItsDataOnlyAfterTheAgentReadItsRecord(t *testing.T) {
	now := time.Unix(10_000, 0)
	ok := GateInput{DataDirClass: "ok", DataDirVerified: true, DataDirMemberID: 7, AdmissionRequired: true, Now: now,
		Obs: observation.Observation{MemberListError: "not asked"}}
	word := func(at time.Time) record.Admission {
		return record.Admission{ClusterSeen: true, ClusterID: 0xc1, Record: "ns/rec", CheckedAt: at}
	}
	for _, tc := range []struct {
		name string
		in   func(GateInput) GateInput
		pass bool
	}{
		{"no word yet: held", func(in GateInput) GateInput { return in }, false},
		{"word unreadable: held", func(in GateInput) GateInput { in.AdmissionError = "bad json"; return in }, false},
		{"old word: held", func(in GateInput) GateInput {
			in.Admission = word(now.Add(-AdmissionFreshFor - time.Second))
			return in
		}, false},
		{"word from the future: held", func(in GateInput) GateInput { in.Admission = word(now.Add(time.Minute)); return in }, false},
		{"fresh word, the record has no pin for it: passes", func(in GateInput) GateInput { in.Admission = word(now.Add(-time.Second)); return in }, true},
		{"pinned: passes without a word", func(in GateInput) GateInput {
			in.Pin = record.Pin{Member: "etcd-1", ClusterID: 0xc1, MemberID: 7}
			return in
		}, true},
		{"a static-pod member needs no word", func(in GateInput) GateInput { in.AdmissionRequired = false; return in }, true},
	} {
		v := DecideGate(tc.in(ok))
		if v.Pass != tc.pass || (!v.Pass && v.Reason != GateAwaitingAgent) {
			t.Errorf("%s: %+v", tc.name, v)
		}
	}
}

// Only a learner the agent prepared, or one a person named in the start
// file, starts with the rejoin flags; a hold never does.
func TestOnlyAPreparedLearnerStartsWithTheStartFlags(t *testing.T) {
	for _, c := range []struct {
		v    GateVerdict
		want bool
	}{
		{pass(GatePrepared, ""), true},
		{pass(GateLearnerStartFlags, ""), true},
		{pass(GateDataDirOK, ""), false},
		{pass(GateNeverSeen, ""), false},
		{hold(GatePrepared, ""), false},
	} {
		if got := c.v.StartsWithStartFlags(); got != c.want {
			t.Errorf("%+v: starts with the start flags = %v, want %v", c.v, got, c.want)
		}
	}
}

func TestAnAnswersDryRunIsTheDryRunReason(t *testing.T) {
	if !AnswersADryRun(string(ReasonDryRun)) || AnswersADryRun(string(ReasonMajorityLost)) || AnswersADryRun("") {
		t.Fatal("AnswersADryRun does not say dry-run for exactly the dry-run reason")
	}
}
