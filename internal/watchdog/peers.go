package watchdog

import (
	"context"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// peerProbe is the last full probe of a healthy cluster: a routine poll
// (Run) within PeerProbeEvery of it asks only the local member (its Status,
// and a linearizable read through it, which needs a quorum), and takes the
// member list and the other members' state from here. An agent serving
// many members spends most of its CPU on gRPC to the peers and on the
// member list, and neither changes often in a healthy cluster; what the
// agent acts on never comes from here (the healer and the steward observe
// afresh, with Observe, before every step). Its age is at most two poll
// intervals (DESIGN §4: a member serves if it answered within them).
type peerProbe struct {
	at      time.Time
	members []observation.Member // in the observation's order
	cluster uint64
	localID uint64
}

// rememberProbe keeps a full observation for the routine polls that
// follow, only when it shows nothing amiss: the local member matched and
// serving, every member serving, one leader, no learner, no foreign answer.
func (w *Watchdog) rememberProbe(now time.Time, o observation.Observation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peers = peerProbe{}
	if w.cfg.PeerProbeEvery <= 0 || o.MemberListError != "" || o.Local.Match != observation.MatchOK || !o.Local.Serving ||
		o.LeaderID == 0 || len(o.ForeignEndpoints) > 0 || o.ClusterID == 0 {
		return
	}
	for _, m := range o.Members {
		if !m.Serving || m.IsLearner {
			return
		}
	}
	w.peers = peerProbe{at: now, members: slices.Clone(o.Members), cluster: o.ClusterID, localID: o.Local.ID}
}

// quickObserve is a routine poll from the last full probe and a fresh one
// of the local member; ok is false (a full observation is due) when that
// probe is stale or gone, or the local member does not answer as the same
// serving member of the same cluster.
func (w *Watchdog) quickObserve(ctx context.Context, now time.Time, obs observation.Observation) (observation.Observation, bool) {
	w.mu.Lock()
	p := w.peers
	w.mu.Unlock()
	if p.members == nil || now.Sub(p.at) >= w.cfg.PeerProbeEvery || now.Before(p.at) || (obs.PinnedClusterID != 0 && obs.PinnedClusterID != p.cluster) {
		return obs, false
	}
	li := slices.IndexFunc(p.members, func(m observation.Member) bool { return m.ID == p.localID })
	if li < 0 || len(p.members[li].ClientURLs) == 0 || p.members[li].ClientURLs[0] != obs.Local.ClientURL {
		return obs, false
	}
	members := slices.Clone(p.members)
	ans := w.clients.probe(ctx, &members[li], p.cluster)
	if !members[li].Serving || ans.member != p.localID || ans.cluster != p.cluster || ans.leader == 0 {
		return obs, false
	}
	if !slices.ContainsFunc(members, func(m observation.Member) bool { return m.ID == ans.leader }) {
		return obs, false // a leader the last list does not have: membership changed
	}
	for i := range members { // the leader as the local member knows it now
		members[i].IsLeader = members[i].ID == ans.leader
	}
	obs.Members, obs.ClusterID, obs.PinnedClusterID = members, p.cluster, w.pin()
	obs.Local.AnsweringID, obs.Local.AnsweringClusterID = ans.member, ans.cluster
	obs.LeaderID = observation.Leader(members)
	observation.MatchLocal(&obs)
	if obs.Local.Match != observation.MatchOK || obs.Local.ID != p.localID {
		return obs, false
	}
	var foreign []string // the local member's own alarms: asked every poll
	obs.Local.Serving, obs.Local.IsLearner = true, false
	obs.Local.Alarms = w.alarms(ctx, []string{obs.Local.ClientURL}, p.localID, p.cluster, &foreign)
	if len(foreign) > 0 {
		return obs, false
	}
	return obs, true
}
