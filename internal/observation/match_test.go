package observation

import "testing"

func TestMatchLocalNeedsNameAndPeerURL(t *testing.T) {
	peer := []string{"http://10.0.0.2:2380"}
	member := func(id uint64, name string, peers ...string) Member {
		return Member{ID: id, Name: name, PeerURLs: peers}
	}
	for _, tc := range []struct {
		name    string
		members []Member
		listErr string
		want    Match
		wantID  uint64
	}{
		{"name and peer URL match one member", []Member{member(1, "a", "http://10.0.0.1:2380"), member(2, "b", peer[0])}, "", MatchOK, 2},
		{"unstarted member with our peer URL", []Member{member(1, "a", "http://10.0.0.1:2380"), member(3, "", peer[0])}, "", MatchOK, 3},
		{"not in the list", []Member{member(1, "a", "http://10.0.0.1:2380")}, "", MatchNotFound, 0},
		{"our name with another peer URL is ambiguous", []Member{member(2, "b", "http://10.0.0.9:2380")}, "", MatchAmbiguous, 0},
		{"our peer URL under another name is ambiguous", []Member{member(2, "z", peer[0])}, "", MatchAmbiguous, 0},
		{"two members with our name are ambiguous", []Member{member(2, "b", peer[0]), member(4, "b", "http://10.0.0.4:2380")}, "", MatchAmbiguous, 0},
		{"no member list at all", nil, "no leader", MatchNotFound, 0},
		{"stale list still identifies us", []Member{member(2, "b", peer[0])}, "no leader", MatchOK, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := Observation{Members: tc.members, MemberListError: tc.listErr,
				Local: Local{Name: "b", PeerURLs: peer}}
			MatchLocal(&obs)
			if obs.Local.Match != tc.want || obs.Local.ID != tc.wantID {
				t.Fatalf("match %s id %d (%s), want %s id %d", obs.Local.Match, obs.Local.ID, obs.Local.MatchDetail, tc.want, tc.wantID)
			}
		})
	}
}

// Rule 7: what answers at our client URL must be the member matched by name
// and peer URL, of the listed cluster; anything else is ambiguous.
func TestMatchLocalProvenByWhatAnswers(t *testing.T) {
	peer := []string{"http://10.0.0.2:2380"}
	list := []Member{{ID: 1, Name: "a", PeerURLs: []string{"http://10.0.0.1:2380"}}, {ID: 2, Name: "b", PeerURLs: peer}}
	for _, tc := range []struct {
		name              string
		local             Local
		members           []Member
		answer, answerCID uint64
		want              Match
		wantID            uint64
	}{
		{"matched member answers", Local{Name: "b", PeerURLs: peer}, list, 2, 7, MatchOK, 2},
		{"nothing answers: the match stands", Local{Name: "b", PeerURLs: peer}, list, 0, 0, MatchOK, 2},
		{"another member answers at our client URL", Local{Name: "b", PeerURLs: peer}, list, 1, 7, MatchAmbiguous, 0},
		{"an unlisted member answers", Local{Name: "b", PeerURLs: peer}, list, 9, 7, MatchAmbiguous, 0},
		{"our member ID but another cluster", Local{Name: "b", PeerURLs: peer}, list, 2, 8, MatchAmbiguous, 0},
		{"nothing matched, a process answers", Local{Name: "x", PeerURLs: []string{"http://127.0.0.99:1"}}, list, 2, 7, MatchAmbiguous, 0},
		{"nothing matched, nothing answers", Local{Name: "x", PeerURLs: []string{"http://127.0.0.99:1"}}, list, 0, 0, MatchNotFound, 0},
		{"no member list, a process answers", Local{Name: "b", PeerURLs: peer}, nil, 2, 7, MatchAmbiguous, 0},
		{"unstarted learner of ours, old process answers", Local{Name: "b", PeerURLs: peer},
			[]Member{list[0], {ID: 3, PeerURLs: peer, IsLearner: true}}, 2, 7, MatchAmbiguous, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := Observation{ClusterID: 7, Members: tc.members, Local: tc.local}
			if tc.members == nil {
				obs.ClusterID, obs.MemberListError = 0, "no leader"
			}
			obs.Local.AnsweringID, obs.Local.AnsweringClusterID = tc.answer, tc.answerCID
			MatchLocal(&obs)
			if obs.Local.Match != tc.want || obs.Local.ID != tc.wantID {
				t.Fatalf("match %s id %d (%s), want %s id %d", obs.Local.Match, obs.Local.ID, obs.Local.MatchDetail, tc.want, tc.wantID)
			}
			if tc.want == MatchAmbiguous && obs.Local.MatchDetail == "" {
				t.Fatal("an ambiguous match must say why")
			}
		})
	}
}

// Several members claiming the lead in one observation is no leader.
func TestLeaderIsTheOneServingLeader(t *testing.T) {
	m := func(id uint64, leader, serving bool) Member {
		return Member{ID: id, IsLeader: leader, Serving: serving}
	}
	for _, tc := range []struct {
		name    string
		members []Member
		want    uint64
	}{
		{"one leader", []Member{m(1, false, true), m(2, true, true), m(3, false, true)}, 2},
		{"none", []Member{m(1, false, true), m(2, false, true)}, 0},
		{"a leader that does not serve is none", []Member{m(1, true, false), m(2, false, true)}, 0},
		{"two leaders is none", []Member{m(1, true, true), m(2, false, true), m(3, true, true)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Leader(tc.members); got != tc.want {
				t.Fatalf("Leader = %d, want %d", got, tc.want)
			}
		})
	}
}
