package plan

import (
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

func srcMember(id uint64, serving, leader bool, applied uint64) observation.Member {
	return observation.Member{ID: id, Name: "m" + string(rune('0'+id)), ClientURLs: []string{"http://127.0.0.1:2379"},
		Serving: serving, IsLeader: leader, AppliedIndex: applied}
}

func TestPickSource(t *testing.T) {
	learner := srcMember(5, true, false, 999)
	learner.IsLearner = true
	noURL := srcMember(6, true, false, 999)
	noURL.ClientURLs = nil

	tests := []struct {
		name       string
		obs        observation.Observation
		exclude    uint64
		wantID     uint64
		wantReason string
		wantErr    bool
	}{
		{
			name: "freshest serving follower wins",
			obs: observation.Observation{LeaderID: 1, Members: []observation.Member{
				srcMember(1, true, true, 100), srcMember(2, true, false, 90), srcMember(3, true, false, 95)}},
			wantID: 3, wantReason: "follower",
		},
		{
			name: "the local member is never the source, however fresh",
			obs: observation.Observation{LeaderID: 1, Members: []observation.Member{
				srcMember(1, true, true, 100), srcMember(2, true, false, 90), srcMember(3, true, false, 95)}},
			exclude: 3, wantID: 2, wantReason: "follower",
		},
		{
			name: "followers that do not serve are skipped",
			obs: observation.Observation{LeaderID: 1, Members: []observation.Member{
				srcMember(1, true, true, 100), srcMember(2, true, false, 90), srcMember(3, false, false, 95)}},
			wantID: 2, wantReason: "follower",
		},
		{
			name: "learners and members without a client URL are never sources",
			obs: observation.Observation{LeaderID: 1, Members: []observation.Member{
				srcMember(1, true, true, 100), srcMember(2, true, false, 90), learner, noURL}},
			wantID: 2, wantReason: "follower",
		},
		{
			name: "leader known only from the observation's LeaderID is still the leader",
			obs: observation.Observation{LeaderID: 3, Members: []observation.Member{
				srcMember(1, true, false, 90), srcMember(3, true, false, 100)}},
			wantID: 1, wantReason: "follower",
		},
		{
			name: "ties go to the lowest ID",
			obs: observation.Observation{LeaderID: 1, Members: []observation.Member{
				srcMember(1, true, true, 100), srcMember(4, true, false, 95), srcMember(3, true, false, 95)}},
			wantID: 3, wantReason: "follower",
		},
		{
			name: "the leader only when no follower serves",
			obs: observation.Observation{LeaderID: 1, Members: []observation.Member{
				srcMember(1, true, true, 100), srcMember(2, false, false, 90), srcMember(3, true, false, 95)}},
			exclude: 3, wantID: 1, wantReason: "leader",
		},
		{
			name: "nobody else serves",
			obs: observation.Observation{LeaderID: 1, Members: []observation.Member{
				srcMember(1, false, true, 100), srcMember(2, false, false, 90), srcMember(3, true, false, 95)}},
			exclude: 3, wantErr: true,
		},
		{name: "empty observation", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason, err := PickSource(tt.obs, tt.exclude)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %x (%s), want an error", got.ID, reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.wantID {
				t.Errorf("got member %x, want %x (reason %q)", got.ID, tt.wantID, reason)
			}
			if !strings.Contains(reason, tt.wantReason) {
				t.Errorf("reason %q does not mention %q", reason, tt.wantReason)
			}
		})
	}
}
