package watchdog

import (
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// peerProbe is the last full probe of every member: a routine poll of a
// healthy cluster asks only the local member (and the member list), and
// takes the others' state from here. An agent serving many members spends
// most of its CPU on gRPC to the peers, and a healthy peer's state changes
// rarely; what the agent decides on never comes from here (the healer and
// the steward observe afresh before every step, with Observe).
type peerProbe struct {
	at      time.Time
	members map[uint64]observation.Member
	alarms  []string
}

// peersFresh: a routine poll may reuse the last probe of the other members.
// Only while that probe is recent (PeerProbeEvery), every member then
// served (a reused probe can only make a failure be seen later, never make
// a healthy member look lost), no learner is present (a change under way),
// the local member is listed, and the member list is the one probed.
func (w *Watchdog) peersFresh(now time.Time, members []observation.Member, local int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.peers
	if w.cfg.PeerProbeEvery <= 0 || local < 0 || p.members == nil || now.Sub(p.at) >= w.cfg.PeerProbeEvery || now.Before(p.at) ||
		len(members) != len(p.members) {
		return false
	}
	for _, m := range members {
		last, ok := p.members[m.ID]
		if !ok || m.IsLearner || last.IsLearner || !last.Serving || !slices.Equal(m.ClientURLs, last.ClientURLs) ||
			!slices.Equal(m.PeerURLs, last.PeerURLs) || m.Name != last.Name {
			return false
		}
	}
	return true
}

// reusePeers fills the members other than local from the last probe.
func (w *Watchdog) reusePeers(members []observation.Member, answers []answer, local int, cluster uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range members {
		if i == local {
			continue
		}
		members[i] = w.peers.members[members[i].ID]
		answers[i] = answer{member: members[i].ID, cluster: cluster}
	}
}

// rememberPeers keeps a full probe for the routine polls that follow; a
// probe without the local member listed is not one to reuse.
func (w *Watchdog) rememberPeers(now time.Time, members []observation.Member, local int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if local < 0 {
		w.peers = peerProbe{}
		return
	}
	w.peers.at, w.peers.members = now, make(map[uint64]observation.Member, len(members))
	for _, m := range members {
		w.peers.members[m.ID] = m
	}
}

// peerAlarms is the local member's alarms as the last full probe saw them;
// rememberAlarms keeps a full probe's.
func (w *Watchdog) peerAlarms() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peers.alarms
}

func (w *Watchdog) rememberAlarms(a []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peers.alarms = a
}
