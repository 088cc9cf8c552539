// Package observation holds what the agent saw at one moment: the cluster's
// members and their health, and the local member and its data dir. It is
// plain data: the watchdog fills it, the decision core and `status` read it.
package observation

import (
	"fmt"
	"slices"
	"time"
)

// Member is one etcd member as seen in the member list and probed directly.
type Member struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	IsLearner  bool     `json:"isLearner"`
	// Serving: answered Status over its client URL and, for a voter, a
	// linearizable read through it, in this poll.
	Serving      bool     `json:"serving"`
	IsLeader     bool     `json:"isLeader"`
	RaftTerm     uint64   `json:"raftTerm,omitempty"`
	RaftIndex    uint64   `json:"raftIndex,omitempty"`
	AppliedIndex uint64   `json:"appliedIndex,omitempty"`
	DBSize       int64    `json:"dbSize,omitempty"`
	Version      string   `json:"version,omitempty"`
	Errors       []string `json:"errors,omitempty"` // from Status (e.g. alarms)
	ProbeError   string   `json:"probeError,omitempty"`
	// AuthFailed: its TLS handshake failed on trust (a certificate the
	// agent cannot verify, or the agent's refused): it may serve others.
	AuthFailed bool `json:"authFailed,omitempty"`
	// DowngradeEnabled: the member reports an etcd downgrade in progress
	// (3.6's Status; 3.5 has none): only etcd's target minor may join.
	DowngradeEnabled bool `json:"downgradeEnabled,omitempty"`
}

// Match says how the local member was found in the member list (rule 7:
// by name AND peer URL; anything else is not good enough to act on).
type Match string

// Match values.
const (
	MatchOK        Match = "ok"
	MatchNotFound  Match = "not-found"
	MatchAmbiguous Match = "ambiguous"
)

// Local is this node's member.
type Local struct {
	Name      string   `json:"name"`
	PeerURLs  []string `json:"peerURLs"`
	ClientURL string   `json:"clientURL"`
	DataDir   string   `json:"dataDir"`
	// WALDir is the dedicated --wal-dir, "" when the WAL is in the data dir.
	WALDir string `json:"walDir,omitempty"`
	// DataDirClass is a localdisk class: ok, missing, empty, corrupt, foreign, in-use, stale.
	DataDirClass  string `json:"dataDirClass"`
	DataDirDetail string `json:"dataDirDetail,omitempty"`
	// DataDirVerified: the deep check confirmed DataDirClass (not the
	// layout check alone, whose corrupt can be a member bootstrapping).
	DataDirVerified bool `json:"dataDirVerified,omitempty"`
	// DataDirClusterID is the cluster the data dir's WAL names (0 when not
	// read): before a pin exists it is the only other witness of which
	// cluster this member belongs to.
	DataDirClusterID uint64 `json:"dataDirClusterID,omitempty"`
	// DataDirMemberID is the member the data dir's WAL names (0 when the
	// deep check did not read it).
	DataDirMemberID uint64 `json:"dataDirMemberID,omitempty"`
	// DataDirRaft is where the data dir's log stands, read read-only
	// while the member does not hold it (zero otherwise): what a restore
	// from it would keep when the majority is lost (internal/survivor).
	DataDirRaft *RaftPosition `json:"dataDirRaft,omitempty"`
	// DataDirRaftError says why DataDirRaft could not be read.
	DataDirRaftError string `json:"dataDirRaftError,omitempty"`
	Match            Match  `json:"match"`
	MatchDetail      string `json:"matchDetail,omitempty"`
	// ID is the matched member's ID (0 unless Match is ok).
	ID        uint64   `json:"id,omitempty"`
	Serving   bool     `json:"serving"`
	IsLearner bool     `json:"isLearner"`
	Alarms    []string `json:"alarms,omitempty"`
	// AuthFailed: Member.AuthFailed of the local member.
	AuthFailed bool `json:"authFailed,omitempty"`
	// AnsweringID and AnsweringClusterID are what the process at ClientURL
	// reports in its Status header (0 when nothing answers): rule 7 proves
	// the identity by what answers, not only by name and peer URL.
	AnsweringID        uint64 `json:"answeringID,omitempty"`
	AnsweringClusterID uint64 `json:"answeringClusterID,omitempty"`
}

// RaftPosition is where a member's log stands on its disk.
type RaftPosition struct {
	// Term is the last hard state's term; Commit its commit index (what
	// --force-new-cluster keeps); LastIndex the last entry's index;
	// Applied the db's consistent index.
	Term      uint64 `json:"term"`
	Commit    uint64 `json:"commit"`
	LastIndex uint64 `json:"lastIndex"`
	Applied   uint64 `json:"applied"`
	// Revision is the db's newest revision (0: not read).
	Revision int64 `json:"revision,omitempty"`
	// FromWAL: read from the WAL alone while etcd held the db (Applied
	// unknown): a member that runs but cannot serve.
	FromWAL bool `json:"fromWAL,omitempty"`
}

// Observation is one poll's view.
type Observation struct {
	At        time.Time `json:"at"`
	ClusterID uint64    `json:"clusterID,omitempty"`
	LeaderID  uint64    `json:"leaderID,omitempty"`
	Members   []Member  `json:"members"`
	// ClusterVersion is the cluster version etcd serves at /version
	// ("3.5.0"): the lowest minor its members ran when it was decided;
	// "" unknown (plan's version rule).
	ClusterVersion string `json:"clusterVersion,omitempty"`
	// MemberListError is set when no endpoint returned the member list
	// (with require-leader): the cluster has no quorum or is unreachable.
	// Members are then the last list seen, each still probed directly.
	MemberListError string `json:"memberListError,omitempty"`
	Local           Local  `json:"local"`
	// PinnedClusterID is the cluster every answer used here was checked
	// against (0 when none is pinned or adopted yet).
	PinnedClusterID uint64 `json:"pinnedClusterID,omitempty"`
	// ClusterPinned: PinnedClusterID comes from the pin store (the member
	// was seen serving in it), not from the first member list that answered.
	ClusterPinned bool `json:"clusterPinned,omitempty"`
	// ForeignEndpoints answered for another cluster in this poll; their
	// answers were ignored.
	ForeignEndpoints []string `json:"foreignEndpoints,omitempty"`
	// PeersProbedAt is when every member was last probed: At for a full
	// observation. PeersReused: a routine poll asked nothing and took every
	// member (their state, the leader, the alarms, the membership) from the
	// full probe at PeersProbedAt, while each member's liveness stream had
	// stayed open since. Nothing acts on such an observation.
	PeersProbedAt time.Time `json:"peersProbedAt"`
	PeersReused   bool      `json:"peersReused,omitempty"`
}

// Voters counts the voting members.
func (o Observation) Voters() int {
	n := 0
	for _, m := range o.Members {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

// ServingVoters counts voters that answered a linearizable read.
func (o Observation) ServingVoters() int {
	n := 0
	for _, m := range o.Members {
		if !m.IsLearner && m.Serving {
			n++
		}
	}
	return n
}

// HealthyVoters counts serving voters, except the local member when its data
// dir is not ok: it serves from open files and cannot survive a restart.
func (o Observation) HealthyVoters() int {
	n := 0
	for _, m := range o.Members {
		if m.IsLearner || !m.Serving {
			continue
		}
		if o.Local.Match == MatchOK && m.ID == o.Local.ID && !DataDirUsable(o.Local.DataDirClass) {
			continue
		}
		n++
	}
	return n
}

// Learners lists the learner members.
func (o Observation) Learners() []Member {
	var out []Member
	for _, m := range o.Members {
		if m.IsLearner {
			out = append(out, m)
		}
	}
	return out
}

// Member returns the member with id.
func (o Observation) Member(id uint64) (Member, bool) {
	i := slices.IndexFunc(o.Members, func(m Member) bool { return m.ID == id })
	if i < 0 {
		return Member{}, false
	}
	return o.Members[i], true
}

// DataDirUsable reports whether a data dir class is one a member can restart on.
func DataDirUsable(class string) bool { return class == DataDirOK || class == DataDirInUse }

// Data dir classes, the verdicts of package localdisk as Local.DataDirClass
// holds them (localdisk.Class* are these).
const (
	DataDirOK      = "ok"      // usable to restart the member
	DataDirMissing = "missing" // does not exist
	DataDirEmpty   = "empty"   // no member data: etcd would start a new member in it
	DataDirCorrupt = "corrupt" // member data present but unusable
	DataDirForeign = "foreign" // intact, but another member's or cluster's
	DataDirInUse   = "in-use"  // a running process holds the db lock
	DataDirStale   = "stale"   // intact and its own, but behind what the member was seen to keep
	// DataDirNotADirectory: the path is a file (or other non-directory):
	// no member data, and no db lock to tell whether etcd still runs.
	DataDirNotADirectory = "not-a-directory"
)

// MatchLocal sets obs.Local.Match: the local member is found by name AND
// peer URL (rule 7 of the design); a member added but not started yet has
// no name, and its peer URL alone matches it. Then what answers at our client
// URL must be that member of that cluster: a process answering for another
// member (or when nothing matched) is never ours to stop. Anything else is
// ambiguous.
func MatchLocal(obs *Observation) {
	matchByList(obs)
	l := &obs.Local
	if l.AnsweringID == 0 || l.Match == MatchAmbiguous {
		return
	}
	switch {
	case l.Match != MatchOK:
		l.MatchDetail = fmt.Sprintf("member %x answers at our client URL %s, but no member has our name %s and peer URL %v (%s)",
			l.AnsweringID, l.ClientURL, l.Name, l.PeerURLs, l.MatchDetail)
	case l.AnsweringID != l.ID:
		l.MatchDetail = fmt.Sprintf("member %x answers at our client URL %s, but the member with our name and peer URL is %x",
			l.AnsweringID, l.ClientURL, l.ID)
	case obs.ClusterID != 0 && l.AnsweringClusterID != obs.ClusterID:
		l.MatchDetail = fmt.Sprintf("the process at our client URL %s answers for cluster %x, the member list is of cluster %x",
			l.ClientURL, l.AnsweringClusterID, obs.ClusterID)
	default:
		return
	}
	l.Match, l.ID = MatchAmbiguous, 0
}

// matchByList matches by name and peer URL in the member list.
func matchByList(obs *Observation) {
	l := &obs.Local
	var byBoth, byName, byPeer []Member
	for _, m := range obs.Members {
		nameOK := m.Name == l.Name
		peerOK := Overlaps(m.PeerURLs, l.PeerURLs)
		switch {
		case nameOK && peerOK:
			byBoth = append(byBoth, m)
		case nameOK:
			byName = append(byName, m)
		case peerOK:
			byPeer = append(byPeer, m)
		}
	}
	switch {
	case obs.MemberListError != "" && len(obs.Members) == 0:
		l.Match, l.MatchDetail = MatchNotFound, "no member list"
	case len(byBoth) == 1 && len(byName) == 0 && len(byPeer) == 0:
		l.Match, l.ID = MatchOK, byBoth[0].ID
	case len(byBoth) == 0 && len(byName) == 0 && len(byPeer) == 1 && byPeer[0].Name == "":
		l.Match, l.ID = MatchOK, byPeer[0].ID
		l.MatchDetail = "unstarted member with our peer URL"
	case len(byBoth)+len(byName)+len(byPeer) == 0:
		l.Match, l.MatchDetail = MatchNotFound, fmt.Sprintf("no member named %s with peer URL %v", l.Name, l.PeerURLs)
	default:
		l.Match = MatchAmbiguous
		l.MatchDetail = fmt.Sprintf("%d member(s) match name and peer URL, %d only the name, %d only the peer URL",
			len(byBoth), len(byName), len(byPeer))
	}
}

// Overlaps reports whether two URL lists share a URL (a member is known by
// its peer URLs).
func Overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// Leader returns the one serving member that says it leads; with several
// (a stale leader, or answers mixed from two clusters) there is no leader.
func Leader(members []Member) uint64 {
	var id uint64
	for _, m := range members {
		if m.IsLeader && m.Serving {
			if id != 0 {
				return 0
			}
			id = m.ID
		}
	}
	return id
}
