package plan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Gate verdict codes: why etcd may start, or why it is held.
const (
	GateDataDirOK       Reason = "data-dir-ok"
	GatePrepared        Reason = "prepared-for-learner"
	GateNeverStarted    Reason = "member-never-started"
	GateNeverSeen       Reason = "never-seen-bootstrap"
	GateNotMember       Reason = "not-a-member"
	GateDataDirUnusable Reason = "data-dir-unusable"
	GateMemberExisted   Reason = "member-existed"
	GateClusterUnknown  Reason = "cluster-unreachable"
	GatePinUnreadable   Reason = "pin-unreadable"
	GateUnverified      Reason = "data-dir-unverified"
	GateWouldBootstrap  Reason = "would-bootstrap"
	GateHeldByAgent     Reason = "held-by-agent"
	// GateLearnerStartFlags: a learner added by hand starts with the flags
	// a person left in start-flags.json (the pod runtime's file).
	GateLearnerStartFlags Reason = "learner-start-flags"
	GateAwaitingAgent     Reason = "awaiting-agent"
	GateIdentityMismatch  Reason = ReasonAmbiguousIdentity
)

// GateInput is what the start gate looked at, once.
type GateInput struct {
	// DataDirClass is the data dir's localdisk class, checked against the
	// pinned cluster; DataDirMemberID the member ID its WAL names (0 when
	// there is no readable WAL).
	DataDirClass    string
	DataDirDetail   string
	DataDirMemberID uint64
	// DataDirVerified: the data dir check finished (an interrupted deep
	// check says "ok" for a layout it did not read).
	DataDirVerified bool
	// Pin is what the agent has seen of this member (zero: never seen
	// serving); PinError says why it could not be read.
	Pin      record.Pin
	PinError string
	Journal  record.Record
	// Obs is a fresh observation; a MemberListError means the cluster
	// could not be asked.
	Obs observation.Observation
	// Bootstrap: etcd's flags would bootstrap a new cluster
	// (--initial-cluster-state new or unset) from InitialClusterPeers
	// (the peer URLs of --initial-cluster).
	Bootstrap           bool
	InitialClusterPeers []string
	// StartFlagsInitialCluster is the --initial-cluster of a readable
	// start-flags.json (state existing) in the member's state dir, "" when
	// there is none; with bootstrap flags it is taken only for a learner
	// that never started and that it names (GateLearnerStartFlags).
	StartFlagsInitialCluster string
	// HeldByAgent, when set, says why the agent holds the member stopped
	// (the pod runtime's hold: its pod is re-created at once, so the gate
	// keeps etcd down until the agent releases it).
	HeldByAgent string
	// AdmissionRequired: a pod member's gate (--member-source=pods), whose
	// state dir starts empty on every new node and claim, lets a first
	// bootstrap through only on the agent's Admission, read from the
	// cluster's record; a "never served" counts while younger than
	// AdmissionFreshFor at Now.
	AdmissionRequired bool
	Admission         record.Admission
	AdmissionError    string
	Now               time.Time
}

// AdmissionFreshFor is how long the agent's "this cluster never served"
// is trusted: the agent renews it while the member has no pin.
const AdmissionFreshFor = 2 * time.Minute

// GateVerdict is the gate's answer for one look.
type GateVerdict struct {
	Pass   bool
	Reason Reason
	Detail string
	// Until: a forced start's arm mark is valid until then; the gate sets
	// the request aside before it, or does not force (the agent keeps the
	// Lease only until then, unless it sees the request used).
	Until time.Time
	// Request: a forced start's request, as judged (the gate forces only
	// if the file it sets aside is this one).
	Request ForceNewClusterRequest
}

// DecideGate is the start gate's rule (docs/design.md §6, rule 9): etcd may start
// on a healthy data dir of this member, or on one the agent prepared for a
// new member ID; never on missing, empty, corrupt, foreign or another
// member's data under an ID that has served before. "The cluster cannot be
// asked" means hold for a member that has been seen serving (a power event
// must not turn a lost data dir into a fresh one-member cluster under the
// old IDs); only a member never seen may bootstrap.
func DecideGate(in GateInput) GateVerdict {
	if in.PinError != "" {
		return hold(GatePinUnreadable, "the agent's record of this member cannot be read ("+in.PinError+"): cannot tell whether it has served before")
	}
	if in.HeldByAgent != "" {
		return hold(GateHeldByAgent, "the agent holds this member stopped: "+in.HeldByAgent)
	}
	expected := expectedMemberIDs(in.Pin, in.Journal)
	o, j := in.Obs, in.Journal
	listed := o.MemberListError == ""
	switch in.DataDirClass {
	case observation.DataDirOK:
		if !in.DataDirVerified {
			return hold(GateUnverified, "the data dir check did not finish ("+in.DataDirDetail+"): its contents are unknown")
		}
		if len(expected) == 0 || slices.Contains(expected, in.DataDirMemberID) {
			if v, held := unpinnedHold(in); held {
				return v
			}
			return pass(GateDataDirOK, "data dir ok")
		}
		// A member replaced by hand (remove, add, start) while the agent
		// did not see it serve: the cluster lists the data dir's member ID
		// under our name and peer URL, in the pinned cluster.
		if listed && o.Local.Match == observation.MatchOK && o.Local.ID == in.DataDirMemberID && in.DataDirMemberID != 0 &&
			(!in.Pin.Seen() || uint64(in.Pin.ClusterID) == o.ClusterID) {
			return pass(GateDataDirOK, fmt.Sprintf("data dir of member %x, which the cluster lists under this member's name and peer URL", in.DataDirMemberID))
		}
		return hold(GateIdentityMismatch, fmt.Sprintf("the data dir belongs to member %x, this member serves as %s: waiting for the agent to replace it",
			in.DataDirMemberID, hexIDs(expected)))
	case observation.DataDirMissing, observation.DataDirEmpty:
	default:
		return hold(GateDataDirUnusable, fmt.Sprintf("data dir is %s (%s): waiting for the agent to replace it", in.DataDirClass, in.DataDirDetail))
	}
	if j.Active() && j.Phase.AtLeast(record.PhasePrepared) && j.NewMemberID != 0 {
		learner := uint64(j.NewMemberID)
		m, ok := o.Member(learner)
		if listed && ok && neverStarted(m) {
			return pass(GatePrepared, fmt.Sprintf("learner %x was added for this data dir and has never started", learner))
		}
		if j.Phase == record.PhasePrepared && (!listed || !ok) {
			// The start the agent is making now (the member list may be
			// slow to show the learner).
			return pass(GatePrepared, fmt.Sprintf("data dir prepared by the agent for the new learner %x", learner))
		}
		return hold(GateMemberExisted, fmt.Sprintf("data dir %s, and learner %x started on it before (phase %s): waiting for the agent", in.DataDirClass, learner, j.Phase))
	}
	if !listed {
		if in.Pin.Seen() {
			return hold(GateClusterUnknown, fmt.Sprintf("data dir %s, the cluster cannot be asked (%s), and this member served before as %s: "+
				"etcd must not start it on empty data (a fresh cluster under the old IDs). If the cluster is gone for good, restoring from a backup is a human's call",
				in.DataDirClass, o.MemberListError, in.Pin))
		}
		if m, ok := startedInLastList(in); ok {
			// No quorum to ask, but a member's own (maybe stale) list shows
			// this member started: it has voted and acknowledged writes.
			return hold(GateMemberExisted, fmt.Sprintf("data dir %s, the cluster cannot be asked (%s), and the last member list seen shows member %s (%x) started: "+
				"etcd must not start it on empty data under its old IDs", in.DataDirClass, o.MemberListError, m.Name, m.ID))
		}
		if in.Bootstrap {
			if v, held := admissionHold(in); held {
				return v
			}
			return pass(GateNeverSeen, "data dir "+in.DataDirClass+", the cluster cannot be asked, this member was never seen serving and its flags bootstrap a new cluster")
		}
		return hold(GateClusterUnknown, "data dir "+in.DataDirClass+" and the cluster cannot be asked: cannot tell whether the member exists")
	}
	if o.Local.Match == observation.MatchAmbiguous {
		return hold(GateIdentityMismatch, "member identity is ambiguous: "+o.Local.MatchDetail)
	}
	if in.Bootstrap {
		// etcd would bootstrap a cluster from --initial-cluster: with the
		// IDs derived from the peer URLs and the token, the same member and
		// cluster IDs as before. Only the first start of the cluster those
		// flags describe may do that.
		// A learner is never a member of the initial cluster: started with
		// new, etcd would run under the member ID the flags derive (the old,
		// removed one) instead of the learner's.
		local := mustMember(o, o.Local.ID)
		if o.Local.Match == observation.MatchOK && local.IsLearner && neverStarted(local) && !j.Active() && in.StartFlagsInitialCluster != "" &&
			startFlagsFit(in.StartFlagsInitialCluster, o, local) {
			return pass(GateLearnerStartFlags, fmt.Sprintf("learner %x was added and has never started: it starts with start-flags.json's --initial-cluster-state=existing and --initial-cluster=%s",
				local.ID, in.StartFlagsInitialCluster))
		}
		if in.Pin.Seen() || !sameCluster(o, in.InitialClusterPeers) || (o.Local.Match == observation.MatchOK && (!neverStarted(local) || local.IsLearner)) {
			return hold(GateWouldBootstrap, fmt.Sprintf("data dir %s and etcd's flags would bootstrap a new cluster (--initial-cluster-state new) while a cluster exists: "+
				"waiting for the agent to rejoin this member (it starts it with --initial-cluster-state=existing)", in.DataDirClass))
		}
		return pass(GateNeverSeen, "data dir "+in.DataDirClass+": the first start of the cluster --initial-cluster describes")
	}
	switch o.Local.Match {
	case observation.MatchOK:
		m, _ := o.Member(o.Local.ID)
		switch {
		case in.Pin.Seen() && uint64(in.Pin.MemberID) == m.ID:
			return hold(GateMemberExisted, fmt.Sprintf("data dir %s while member %x, which served here before, is still in the cluster: waiting for the agent to rejoin it under a new ID", in.DataDirClass, m.ID))
		case !neverStarted(m):
			return hold(GateMemberExisted, fmt.Sprintf("data dir %s while member %x still exists under its old ID: waiting for the agent to prepare it", in.DataDirClass, m.ID))
		}
		return pass(GateNeverStarted, fmt.Sprintf("member %x was added and has never started: a new member starts on an empty data dir", m.ID))
	}
	return pass(GateNotMember, "data dir "+in.DataDirClass+" and the member is not in the cluster (etcd itself refuses to join)")
}

// admissionHold: with the cluster unreachable, may a pod member whose
// state dir has no pin bootstrap? Only on the agent's recent word that the
// cluster's record has never seen it serve.
func admissionHold(in GateInput) (GateVerdict, bool) {
	if !in.AdmissionRequired {
		return GateVerdict{}, false
	}
	if v, held := noFreshWord(in, "the cluster cannot be asked and the agent has not yet said whether this member's cluster has served before "+
		"(its record outlives nodes): a member re-created on a new node or claim must not bootstrap under its old IDs"); held {
		return v, true
	}
	if a := in.Admission; a.ClusterSeen {
		return hold(GateClusterUnknown, fmt.Sprintf("the cluster cannot be asked, and cluster %x has served before (%s): etcd must not bootstrap it again under the old IDs",
			uint64(a.ClusterID), a.Record)), true
	}
	return GateVerdict{}, false
}

// unpinnedHold: may a pod member whose state dir has no pin start on a
// healthy data dir of its own? Only once the agent has read the member's
// record (which outlives nodes and claims): a PVC restored from a volume
// snapshot is a new claim with an empty state dir, and the record's pin,
// with the member's high-water mark, is what tells that copy stale. The
// agent writes the record's pin to the state dir before its word, so a
// fresh word with no pin means the record has none for this member.
func unpinnedHold(in GateInput) (GateVerdict, bool) {
	if !in.AdmissionRequired || in.Pin.Seen() {
		return GateVerdict{}, false
	}
	return noFreshWord(in, "the data dir is a member's and this state dir has no pin (a new node or claim, maybe a restored volume): "+
		"waiting for the agent to read the member's record (its high-water mark) before etcd starts on it")
}

// noFreshWord holds (with why) while the agent's word is missing,
// unreadable or not fresh.
func noFreshWord(in GateInput, why string) (GateVerdict, bool) {
	a := in.Admission
	switch {
	case in.AdmissionError != "":
		return hold(GateAwaitingAgent, "the agent's word on this cluster cannot be read ("+in.AdmissionError+")"), true
	case !a.Given():
		return hold(GateAwaitingAgent, why), true
	case a.CheckedAt.After(in.Now.Add(admissionClockSlack)):
		return hold(GateAwaitingAgent, fmt.Sprintf("the agent's word on the cluster (%s) is dated %s, in the future: a clock stepped back; waiting for a fresh one",
			a.Record, a.CheckedAt.UTC().Format(time.RFC3339))), true
	case in.Now.Sub(a.CheckedAt) > AdmissionFreshFor:
		return hold(GateAwaitingAgent, fmt.Sprintf("the agent's word on the cluster (%s) is from %s, older than %s: waiting for a fresh one",
			a.Record, a.CheckedAt.UTC().Format(time.RFC3339), AdmissionFreshFor)), true
	}
	return GateVerdict{}, false
}

// admissionClockSlack is how far in the future an admission may be dated
// (the agent and the gate read one node's clock).
const admissionClockSlack = 5 * time.Second

// startedInLastList finds this member started in the member list the
// observation holds although the cluster could not be asked (a surviving
// member's own list, or the last one seen): by peer URL, or by name in a
// list that is this member's cluster's (it shares a peer URL with
// --initial-cluster, or it is the pinned or admitted cluster): member
// names such as etcd-0 repeat in every cluster of a management node.
func startedInLastList(in GateInput) (observation.Member, bool) {
	o := in.Obs
	ours := o.ClusterID != 0 && (o.ClusterID == uint64(in.Pin.ClusterID) || o.ClusterID == uint64(in.Admission.ClusterID))
	for _, m := range o.Members {
		ours = ours || observation.Overlaps(m.PeerURLs, in.InitialClusterPeers)
	}
	for _, m := range o.Members {
		if ((ours && m.Name == o.Local.Name && m.Name != "") || observation.Overlaps(m.PeerURLs, o.Local.PeerURLs)) && !neverStarted(m) {
			return m, true
		}
	}
	return observation.Member{}, false
}

// expectedMemberIDs are the member IDs a healthy data dir of this member may
// name: the one it was last seen serving under, and the learner an open or
// successful recovery prepared it for.
func expectedMemberIDs(p record.Pin, j record.Record) []uint64 {
	var ids []uint64
	if p.Seen() {
		ids = append(ids, uint64(p.MemberID))
	}
	if j.NewMemberID != 0 && j.Phase.AtLeast(record.PhasePrepared) && (j.Active() || j.Result == record.ResultSucceeded) {
		ids = append(ids, uint64(j.NewMemberID))
	}
	return ids
}

// sameCluster: the member list is exactly the members --initial-cluster names.
func sameCluster(o observation.Observation, peers []string) bool {
	var listed []string
	for _, m := range o.Members {
		listed = append(listed, m.PeerURLs...)
	}
	slices.Sort(listed)
	want := slices.Sorted(slices.Values(peers))
	return len(listed) > 0 && slices.Equal(slices.Compact(listed), slices.Compact(want))
}

// startFlagsFit: a --initial-cluster for the learner to join with is
// exactly the cluster now (a stale one from an earlier start is not), and
// lists the learner's peer URLs under its name and no other: etcd joining
// an existing cluster takes the member ID listed under its --name, so a
// mixed-up file would start it as another, live, member.
func startFlagsFit(initialCluster string, o observation.Observation, learner observation.Member) bool {
	byName := map[string][]string{}
	var all []string
	for _, kv := range strings.Split(initialCluster, ",") {
		name, u, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || name == "" || u == "" {
			return false
		}
		byName[name] = append(byName[name], u)
		all = append(all, u)
	}
	mine := slices.Sorted(slices.Values(byName[o.Local.Name]))
	if o.Local.Name == "" || !slices.Equal(mine, slices.Sorted(slices.Values(learner.PeerURLs))) {
		return false
	}
	for name, urls := range byName {
		if name != o.Local.Name && slices.ContainsFunc(urls, func(u string) bool { return slices.Contains(mine, u) }) {
			return false
		}
	}
	return sameCluster(o, all)
}

func mustMember(o observation.Observation, id uint64) observation.Member {
	m, _ := o.Member(id)
	return m
}

// neverStarted: a member that never published its client URLs has never
// served, so it has no state to lose. (Members of the initial cluster have a
// name from --initial-cluster before they first start; added ones have none.)
func neverStarted(m observation.Member) bool { return len(m.ClientURLs) == 0 }

// NextPin is the pinning rule (rule 7): the cluster ID and the member ID
// are recorded the first time the member is seen serving as a voter under
// its own identity, from a linearizable member list (a learner is not
// pinned: a failed heal removes it again); the member ID moves on when
// the member serves under a new ID (after a rejoin); the cluster ID never
// moves on by itself. Each such sight also moves the member's high-water
// mark on (AdvanceHighWater). It returns the pin to store and whether it
// changed.
func NextPin(p record.Pin, member string, o observation.Observation, now time.Time) (record.Pin, bool) {
	l := o.Local
	// A reused probe (no request in that poll) is not a sight of anything.
	if o.PeersReused || l.Match != observation.MatchOK || !l.Serving || l.IsLearner || l.ID == 0 || o.ClusterID == 0 || o.MemberListError != "" ||
		l.AnsweringID != l.ID || l.AnsweringClusterID != o.ClusterID || !observation.DataDirUsable(l.DataDirClass) {
		return p, false
	}
	m, _ := o.Member(l.ID)
	seen := record.Progress{Term: m.RaftTerm, Index: m.RaftIndex, At: now.UTC()}
	if !p.Seen() {
		p = record.Pin{Member: member, ClusterID: record.MemberID(o.ClusterID), MemberID: record.MemberID(l.ID),
			PeerURLs: l.PeerURLs, FirstSeenAt: now.UTC(), SeenAt: now.UTC()}
		p, _ = AdvanceHighWater(p, seen)
		return p, true
	}
	if uint64(p.ClusterID) != o.ClusterID {
		return p, false
	}
	if uint64(p.MemberID) == l.ID && slices.Equal(p.PeerURLs, l.PeerURLs) {
		return AdvanceHighWater(p, seen)
	}
	if uint64(p.MemberID) != l.ID {
		// Another member: the old one's progress says nothing of it.
		p.HighWater, p.Reached = record.Progress{}, record.Progress{}
	}
	p.MemberID, p.PeerURLs, p.SeenAt = record.MemberID(l.ID), l.PeerURLs, now.UTC()
	p, _ = AdvanceHighWater(p, seen)
	return p, true
}

func hexIDs(ids []uint64) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += " or "
		}
		s += fmt.Sprintf("%x", id)
	}
	return s
}

func pass(r Reason, detail string) GateVerdict {
	return GateVerdict{Pass: true, Reason: r, Detail: detail}
}
func hold(r Reason, detail string) GateVerdict { return GateVerdict{Reason: r, Detail: detail} }
