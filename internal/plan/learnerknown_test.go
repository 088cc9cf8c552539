package plan

import (
	"strings"
	"testing"
)

func TestALearnerStartsOnlyOnceEveryVoterListsIt(t *testing.T) {
	url := []string{"https://10.0.0.1:2380"}
	fresh := []ListedMember{{ID: 2, PeerURLs: []string{"https://10.0.0.2:2380"}}, {ID: 0xa9, PeerURLs: url}}
	stale := []ListedMember{{ID: 2, PeerURLs: []string{"https://10.0.0.2:2380"}}, {ID: 0xa1, PeerURLs: url}}
	both := append(append([]ListedMember(nil), stale...), ListedMember{ID: 0xa9, PeerURLs: url})
	for _, tc := range []struct {
		name   string
		lists  map[string][]ListedMember
		failed map[string]string
		ok     bool
		want   string
	}{
		{"every voter applied the remove and the add", map[string][]ListedMember{"m2": fresh, "m3": fresh}, nil, true, "2 voter(s)"},
		{"a voter behind on both", map[string][]ListedMember{"m2": fresh, "m3": stale}, nil, false, "m3 still lists member a1"},
		{"a voter that applied the add but not the remove", map[string][]ListedMember{"m2": fresh, "m3": both}, nil, false, "m3 still lists member a1"},
		{"a voter that does not list the learner", map[string][]ListedMember{"m2": fresh, "m3": fresh[:1]}, nil, false, "m3 does not list learner a9"},
		{"a voter that did not answer", map[string][]ListedMember{"m2": fresh}, map[string]string{"m3": "deadline exceeded"}, false, "m3 did not answer"},
		{"no voter", nil, nil, false, "no voter"},
	} {
		ok, detail := LearnerKnownEverywhere(tc.lists, tc.failed, 0xa9, url)
		if ok != tc.ok || !strings.Contains(detail, tc.want) {
			t.Errorf("%s: %v %q, want %v and %q", tc.name, ok, detail, tc.ok, tc.want)
		}
	}
}
