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
