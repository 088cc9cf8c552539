package watchdog

import (
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

func TestMatchLocalNeedsNameAndPeerURL(t *testing.T) {
	peer := []string{"http://10.0.0.2:2380"}
	member := func(id uint64, name string, peers ...string) observation.Member {
		return observation.Member{ID: id, Name: name, PeerURLs: peers}
	}
	for _, tc := range []struct {
		name    string
		members []observation.Member
		listErr string
		want    observation.Match
		wantID  uint64
	}{
		{"name and peer URL match one member", []observation.Member{member(1, "a", "http://10.0.0.1:2380"), member(2, "b", peer[0])}, "", observation.MatchOK, 2},
		{"unstarted member with our peer URL", []observation.Member{member(1, "a", "http://10.0.0.1:2380"), member(3, "", peer[0])}, "", observation.MatchOK, 3},
		{"not in the list", []observation.Member{member(1, "a", "http://10.0.0.1:2380")}, "", observation.MatchNotFound, 0},
		{"our name with another peer URL is ambiguous", []observation.Member{member(2, "b", "http://10.0.0.9:2380")}, "", observation.MatchAmbiguous, 0},
		{"our peer URL under another name is ambiguous", []observation.Member{member(2, "z", peer[0])}, "", observation.MatchAmbiguous, 0},
		{"two members with our name are ambiguous", []observation.Member{member(2, "b", peer[0]), member(4, "b", "http://10.0.0.4:2380")}, "", observation.MatchAmbiguous, 0},
		{"no member list at all", nil, "no leader", observation.MatchNotFound, 0},
		{"stale list still identifies us", []observation.Member{member(2, "b", peer[0])}, "no leader", observation.MatchOK, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs := observation.Observation{Members: tc.members, MemberListError: tc.listErr,
				Local: observation.Local{Name: "b", PeerURLs: peer}}
			matchLocal(&obs)
			if obs.Local.Match != tc.want || obs.Local.ID != tc.wantID {
				t.Fatalf("match %s id %d (%s), want %s id %d", obs.Local.Match, obs.Local.ID, obs.Local.MatchDetail, tc.want, tc.wantID)
			}
		})
	}
}

func TestRelevantEventsAreInsideTheDataDir(t *testing.T) {
	for path, want := range map[string]bool{
		"/var/lib/etcd":                   true,
		"/var/lib/etcd/member":            true,
		"/var/lib/etcd/member/snap/db":    true,
		"/var/lib/etcd-agent-quarantine":  false,
		"/var/lib/other":                  false,
		"/var/lib/etcd/../etcd-agent/foo": false,
	} {
		if got := relevant(path, "/var/lib/etcd"); got != want {
			t.Errorf("relevant(%s) = %v, want %v", path, got, want)
		}
	}
}
