package plan

import (
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

func TestHighWaterHoldsOnlyProgressTheMemberKept(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	pr := func(term, index uint64, d time.Duration) record.Progress {
		return record.Progress{Term: term, Index: index, At: at(d)}
	}
	for _, tc := range []struct {
		name              string
		hw, reached, seen record.Progress
		wantHW, wantReach record.Progress
		wantChanged       bool
	}{
		{name: "first sight is only reached", seen: pr(2, 100, 0), wantReach: pr(2, 100, 0), wantChanged: true},
		{name: "later progress confirms the earlier", reached: pr(2, 100, 0), seen: pr(2, 101, time.Second),
			wantHW: pr(2, 100, 0), wantReach: pr(2, 101, time.Second), wantChanged: true},
		{name: "no progress is not proof yet", hw: pr(2, 90, 0), reached: pr(2, 100, 0), seen: pr(2, 100, HighWaterSettle-time.Millisecond),
			wantHW: pr(2, 90, 0), wantReach: pr(2, 100, 0)},
		{name: "no progress for the settle time is", hw: pr(2, 90, 0), reached: pr(2, 100, 0), seen: pr(2, 100, HighWaterSettle),
			wantHW: pr(2, 100, 0), wantReach: pr(2, 100, 0), wantChanged: true},
		// A term is raised on a message, before any Ready: no proof.
		{name: "a new term alone is not proof", reached: pr(2, 100, 0), seen: pr(3, 100, time.Second),
			wantReach: pr(3, 100, time.Second), wantChanged: true},
		{name: "a member gone back never lowers the mark", hw: pr(2, 100, 0), reached: pr(2, 120, time.Second), seen: pr(2, 50, 2*time.Second),
			wantHW: pr(2, 100, 0), wantReach: pr(2, 50, 2*time.Second), wantChanged: true},
		{name: "a lower term never confirms", hw: pr(2, 100, 0), reached: pr(3, 120, time.Second), seen: pr(2, 130, 2*time.Second),
			wantHW: pr(2, 100, 0), wantReach: pr(2, 130, 2*time.Second), wantChanged: true},
		{name: "the mark is the max of both", hw: pr(4, 100, 0), reached: pr(3, 120, time.Second), seen: pr(3, 130, 2*time.Second),
			wantHW: pr(4, 120, time.Second), wantReach: pr(3, 130, 2*time.Second), wantChanged: true},
		{name: "a status without progress fields", hw: pr(2, 100, 0), reached: pr(2, 120, time.Second), seen: pr(0, 0, 2*time.Second),
			wantHW: pr(2, 100, 0), wantReach: pr(2, 120, time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, changed := AdvanceHighWater(record.Pin{HighWater: tc.hw, Reached: tc.reached}, tc.seen)
			if p.HighWater != tc.wantHW || p.Reached != tc.wantReach || changed != tc.wantChanged {
				t.Fatalf("got mark %+v reached %+v changed %v; want %+v %+v %v", p.HighWater, p.Reached, changed, tc.wantHW, tc.wantReach, tc.wantChanged)
			}
		})
	}
}

func TestPinProgressIsOfTheMemberItNamesAndOnlyFromRealSights(t *testing.T) {
	now := time.Unix(100, 0)
	obs := func(id, index uint64) observation.Observation {
		return observation.Observation{ClusterID: 0xc1,
			Members: []observation.Member{{ID: id, Serving: true, RaftTerm: 2, RaftIndex: index}},
			Local: observation.Local{Match: observation.MatchOK, ID: id, Serving: true, AnsweringID: id, AnsweringClusterID: 0xc1,
				DataDirClass: "in-use", PeerURLs: []string{"http://p"}}}
	}
	p, _ := NextPin(record.Pin{}, "m", obs(7, 100), now)
	p, _ = NextPin(p, "m", obs(7, 150), now.Add(time.Second))
	if p.HighWater.Index != 100 || p.Reached.Index != 150 {
		t.Fatalf("after two sights: %+v", p)
	}
	reused := obs(7, 400)
	reused.PeersReused = true
	if q, changed := NextPin(p, "m", reused, now.Add(2*time.Second)); changed || q.HighWater != p.HighWater || q.Reached != p.Reached {
		t.Fatalf("a reused probe moved the mark: %+v", q)
	}
	q, changed := NextPin(p, "m", obs(9, 20), now.Add(3*time.Second))
	if !changed || q.MemberID != 9 || q.HighWater != (record.Progress{}) || q.Reached.Index != 20 {
		t.Fatalf("a rejoined member keeps the old one's mark: %+v", q)
	}
}
