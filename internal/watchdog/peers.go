package watchdog

import (
	"context"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// peerProbe is the last full probe of a healthy cluster: a routine poll
// (Run) within PeerProbeEvery of it asks the local member one linearizable
// member list and takes the other members' state from here. An agent
// serving many members spends most of its CPU on gRPC requests, one unit
// per request, and in a healthy cluster the peers' state changes rarely.
// What the agent acts on never comes from here: the healer and the steward
// observe afresh, with Observe, before every step.
type peerProbe struct {
	at      time.Time
	members []observation.Member // in the observation's order
	cluster uint64
	localID uint64
	// term is the local member's term in that probe (etcd's term of its
	// last applied entry), which was the leader's: raft elects at most one
	// leader per term, and a linearizable read is answered only once the
	// member applied past its read index, which a new leader's term
	// reaches. So the same term in a routine poll means the same leader,
	// except in one race etcd leaves open (a read answered while the
	// member stores its applied index but not yet its term): one poll may
	// then name the old leader. Reported only; nothing acts on it.
	term uint64
}

// rememberProbe keeps a full observation for the routine polls that
// follow, only when it shows nothing amiss: the local member matched and
// serving, its Status listing no error (so no alarm anywhere it knows of,
// whether or not the alarms could be asked), every member serving, one
// leader, no learner, no foreign answer.
func (w *Watchdog) rememberProbe(now time.Time, o observation.Observation) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peers = peerProbe{}
	if w.cfg.PeerProbeEvery <= 0 || o.MemberListError != "" || o.Local.Match != observation.MatchOK || !o.Local.Serving ||
		len(o.Local.Alarms) > 0 || o.LeaderID == 0 || len(o.ForeignEndpoints) > 0 || o.ClusterID == 0 {
		return
	}
	for _, m := range o.Members {
		if !m.Serving || m.IsLearner {
			return
		}
	}
	// The leader's term and the local member's must be one: the leader
	// then led the very term the routine polls compare against.
	local, _ := o.Member(o.Local.ID)
	leader, _ := o.Member(o.LeaderID)
	if local.RaftTerm == 0 || local.RaftTerm != leader.RaftTerm || len(local.Errors) > 0 {
		return
	}
	w.peers = peerProbe{at: now, members: slices.Clone(o.Members), cluster: o.ClusterID, localID: o.Local.ID, term: local.RaftTerm}
}

// quickObserve is a routine poll from the last full probe and one request
// to the local member: a linearizable member list, which answers only
// through a leader with a quorum (so the member serves), names who answers
// (rule 7), and shows the membership and the term as they are now. ok is
// false (a full observation is due) when that probe is stale or gone, or
// the answer is not the same serving member of the same cluster, in the
// same term, with the same members.
func (w *Watchdog) quickObserve(ctx context.Context, now time.Time, obs observation.Observation) (observation.Observation, bool) {
	w.mu.Lock()
	p := w.peers
	w.mu.Unlock()
	if p.members == nil || now.Sub(p.at) >= w.cfg.PeerProbeEvery || now.Before(p.at) || (obs.PinnedClusterID != 0 && obs.PinnedClusterID != p.cluster) {
		return obs, false
	}
	li := slices.IndexFunc(p.members, func(m observation.Member) bool { return m.ID == p.localID })
	url := obs.Local.ClientURL
	if li < 0 || len(p.members[li].ClientURLs) == 0 || p.members[li].ClientURLs[0] != url || !w.clients.connected(url) {
		return obs, false
	}
	var foreign []string
	resp, _, err := w.clients.memberList(ctx, []string{url}, true, p.cluster, &foreign)
	if err != nil || resp.Header.MemberId != p.localID || resp.Header.ClusterId != p.cluster ||
		resp.Header.RaftTerm != p.term || !sameMembers(p.members, resp.Members) {
		return obs, false
	}
	obs.Members, obs.ClusterID, obs.PinnedClusterID = slices.Clone(p.members), p.cluster, w.pin()
	obs.Local.AnsweringID, obs.Local.AnsweringClusterID = resp.Header.MemberId, resp.Header.ClusterId
	obs.LeaderID = observation.Leader(obs.Members)
	observation.MatchLocal(&obs)
	if obs.Local.Match != observation.MatchOK || obs.Local.ID != p.localID {
		return obs, false
	}
	obs.Local.Serving, obs.Local.IsLearner = true, false
	obs.PeersProbedAt, obs.PeersReused = p.at, true
	return obs, true
}

// sameMembers: the list names exactly the probed members, each with the
// same name, URLs and role.
func sameMembers(probed []observation.Member, list []*pb.Member) bool {
	if len(probed) != len(list) {
		return false
	}
	for _, l := range list {
		i := slices.IndexFunc(probed, func(m observation.Member) bool { return m.ID == l.ID })
		if i < 0 {
			return false
		}
		m := probed[i]
		if m.Name != l.Name || m.IsLearner != l.IsLearner || !slices.Equal(m.PeerURLs, l.PeerURLs) || !slices.Equal(m.ClientURLs, l.ClientURLs) {
			return false
		}
	}
	return true
}
