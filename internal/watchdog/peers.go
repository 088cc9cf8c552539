package watchdog

import (
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.uber.org/zap"
)

// peerProbe is the last full probe of a healthy cluster: a routine poll
// (Run) within PeerProbeEvery of it takes every member's state from here,
// without a request, while each member's liveness stream (liveness) stays
// open. An agent serving many members spends most of its CPU on gRPC
// requests, one unit per request, and in a healthy cluster the members'
// state changes rarely. What the agent acts on never comes from here: the
// healer and the steward observe afresh, with Observe, before every step.
type peerProbe struct {
	at      time.Time
	members []observation.Member // in the observation's order
	cluster uint64
	localID uint64
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
	// The leader's term and the local member's must be one: the leader a
	// reused probe names was the leader the local member followed then.
	local, _ := o.Member(o.Local.ID)
	leader, _ := o.Member(o.LeaderID)
	if local.RaftTerm == 0 || local.RaftTerm != leader.RaftTerm || len(local.Errors) > 0 {
		return
	}
	w.peers = peerProbe{at: now, members: slices.Clone(o.Members), cluster: o.ClusterID, localID: o.Local.ID}
}

// quickObserve is a routine poll from the last full probe, with no
// request: every member of that probe still has its liveness stream open
// (so none exited, lost its connection or its leader since) and the local
// member's connection is ready. ok is false (a full observation is due)
// when that probe is stale or gone, or any stream ended.
func (w *Watchdog) quickObserve(now time.Time, obs observation.Observation) (observation.Observation, bool) {
	w.mu.Lock()
	p := w.peers
	w.mu.Unlock()
	if p.members == nil || now.Sub(p.at) >= w.cfg.PeerProbeEvery || now.Before(p.at) || (obs.PinnedClusterID != 0 && obs.PinnedClusterID != p.cluster) {
		return obs, false
	}
	li := slices.IndexFunc(p.members, func(m observation.Member) bool { return m.ID == p.localID })
	url := obs.Local.ClientURL
	if li < 0 || len(p.members[li].ClientURLs) == 0 || p.members[li].ClientURLs[0] != url || !w.clients.connected(url) || !w.live.intact(p.members) {
		return obs, false
	}
	obs.Members, obs.ClusterID, obs.PinnedClusterID = slices.Clone(p.members), p.cluster, w.pin()
	// Who answers at the local URL (rule 7) is who answered its stream.
	obs.Local.AnsweringID, obs.Local.AnsweringClusterID = p.localID, p.cluster
	obs.LeaderID = observation.Leader(obs.Members)
	observation.MatchLocal(&obs)
	if obs.Local.Match != observation.MatchOK || obs.Local.ID != p.localID {
		return obs, false
	}
	obs.Local.Serving, obs.Local.IsLearner = true, false
	obs.PeersProbedAt, obs.PeersReused = p.at, true
	return obs, true
}

// watchLiveness opens the liveness streams of a remembered probe's
// members (those not open yet); a member whose stream does not open
// makes the probe forgotten, so the next routine poll is a full one.
func (w *Watchdog) watchLiveness() {
	w.mu.Lock()
	p := w.peers
	w.mu.Unlock()
	if p.members == nil || !w.running.Load() {
		return
	}
	err := w.live.ensure(w.clients, p.members, p.cluster, w.cfg.ProbeTimeout)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil && w.peers.at.Equal(p.at) {
		w.peers = peerProbe{}
	}
	// Said once per different failure, and once when they open again.
	switch msg := errString(err); {
	case msg == w.liveErr:
	case err != nil:
		w.cfg.Log.Warn("liveness streams do not open; every poll probes every member until they do", zap.Error(err))
	default:
		w.cfg.Log.Info("liveness streams open again")
	}
	w.liveErr = errString(err)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
