// Package survivor chooses, when a cluster's majority is lost, the member
// to restore it from, and writes the commands a person runs to do it
// (docs/runbooks/README.md, "Majority lost: restore"). It is pure: the
// evidence comes in (what each member's etcd answered, what each agent read
// of its data dir), a choice and a script go out. Nothing here acts: the
// agents never restore by themselves (docs/design.md, rule 1).
package survivor

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Source says where a member's raft position comes from.
type Source string

// Sources, most direct first.
const (
	// FromEtcd: its etcd answered Status (a member without a leader still
	// does): the committed index it has seen.
	FromEtcd Source = "etcd"
	// FromDataDir: its agent read its data dir read-only (only the WAL,
	// without a lock, while a member that cannot serve holds it): the
	// commit index of its WAL's last hard state.
	FromDataDir Source = "data-dir"
)

// Member is the evidence on one member of the cluster.
type Member struct {
	Name    string `json:"name"`
	ID      uint64 `json:"id,omitempty"`
	PeerURL string `json:"peerURL"`
	// OtherPeerURLs are its peer URLs after the first (the procedures
	// handle one).
	OtherPeerURLs []string `json:"otherPeerURLs,omitempty"`
	// ClientURL reaches its etcd (the restored cluster's, for the survivor).
	ClientURL string `json:"clientURL,omitempty"`
	// Node is the node its agent reported from ("" when no agent did).
	Node string `json:"node,omitempty"`
	// Source is "" when neither its etcd nor its agent said where its log
	// stands.
	Source Source `json:"source,omitempty"`
	// Term and Commit: where its log stands. A restore from it keeps the
	// entries up to Commit (--force-new-cluster drops the ones after).
	Term   uint64 `json:"term,omitempty"`
	Commit uint64 `json:"commit,omitempty"`
	// Applied is its db's applied index, and Revision its newest
	// revision, when known.
	Applied  uint64 `json:"applied,omitempty"`
	Revision int64  `json:"revision,omitempty"`
	// Hash is etcd's HashKV of its data at HashRevision (known when
	// HashRevision > 0): its etcd's answer, or its agent's hash of its
	// stopped db. Equal at one revision: the same keys and values; the
	// restored cluster's at that revision is the survivor's. HashNote:
	// why none.
	Hash         uint32 `json:"hash,omitempty"`
	HashRevision int64  `json:"hashRevision,omitempty"`
	HashNote     string `json:"hashNote,omitempty"`
	// DataDir is its agent's verdict on its data dir (ok, missing, empty,
	// corrupt, foreign, stale, in-use), "" when no agent reported.
	DataDir string `json:"dataDir,omitempty"`
	// ReportedAt is when its agent's report was made (zero: none).
	ReportedAt time.Time `json:"reportedAt,omitzero"`
	// Problem is why it cannot be restored from ("" when it can): Choose
	// sets it.
	Problem string `json:"problem,omitempty"`
	// Serving: its agent says its etcd serves (with a leader), and
	// QuorumSeen: its agent sees a quorum. Either means a quorum exists
	// somewhere (a partition from here): nothing is restored.
	Serving    bool `json:"serving,omitempty"`
	QuorumSeen bool `json:"quorumSeen,omitempty"`
	// DataDirVerified: its agent's deep check confirmed DataDir.
	DataDirVerified bool `json:"dataDirVerified,omitempty"`
	// LastIndex is the last entry its WAL holds, when read.
	LastIndex uint64 `json:"lastIndex,omitempty"`
	// IsLearner: a learner cannot lead a cluster; it is never the survivor.
	IsLearner bool `json:"isLearner,omitempty"`
	// Leader is the leader its etcd names (0: none): a member that has
	// one is in a quorum, wherever this node stands.
	Leader uint64 `json:"leader,omitempty"`
	// DeclaredLost: a person said it is gone for good (status --cluster
	// --lost): known to hold nothing, though nothing reported on it.
	DeclaredLost bool `json:"declaredLost,omitempty"`
	// Note is what went wrong gathering the evidence (its agent did not
	// answer, or answered for another member).
	Note string `json:"note,omitempty"`
	// Paths on its node, for the commands.
	Paths Paths `json:"paths"`
	// Pod is its pod, "namespace/name", for a StatefulSet member
	// (status --cluster --member-source=pods).
	Pod string `json:"pod,omitempty"`
}

// Paths are where a member's files lie on its node.
type Paths struct {
	Manifest      string `json:"manifest,omitempty"`
	DataDir       string `json:"dataDir,omitempty"`
	WALDir        string `json:"walDir,omitempty"`
	QuarantineDir string `json:"quarantineDir,omitempty"`
	// StateDir is its agent's state dir for it (a pod member's gate reads
	// the force-new-cluster request there).
	StateDir string `json:"stateDir,omitempty"`
	// DataDirMountPoint: the data dir is a mount root (a dedicated disk
	// mounted at it); DataDirSymlink: its path is a symlink; as its agent
	// saw. LayoutUnknown says why neither is known ("" known).
	DataDirMountPoint bool   `json:"dataDirMountPoint,omitempty"`
	DataDirSymlink    bool   `json:"dataDirSymlink,omitempty"`
	LayoutUnknown     string `json:"layoutUnknown,omitempty"`
}

// Choice is the answer.
type Choice struct {
	// Refused says why no restore is proposed ("" when one is).
	Refused string `json:"refused,omitempty"`
	// Survivor is the member to restore from (nil when refused).
	Survivor *Member `json:"survivor,omitempty"`
	// Why says why it was chosen over the others.
	Why string `json:"why,omitempty"`
	// Members: every member, candidates best first, then the others.
	Members []Member `json:"members"`
	// Unknown names members nothing reported on: if one's data is intact
	// and newer, it is the better survivor; a person checks it first.
	Unknown []string `json:"unknown,omitempty"`
	// Lost says what a restore from Survivor loses.
	Lost string `json:"lost,omitempty"`
}

// StaleAfter: an agent's report older than this is not evidence.
const StaleAfter = 2 * time.Minute

// Choose picks the member whose log keeps the most: the highest of its
// commit and applied index (etcd keeps both under --force-new-cluster; a
// crash can leave the WAL's commit behind the db's), then the highest
// term, then one whose etcd answers, then the name. A member is a
// candidate when its etcd answered, or its agent read where its log stands
// within StaleAfter (its data dir ok, or held by an etcd that does not
// serve), and its data dir is not known to be gone. quorum says this node
// sees a quorum; so does any member that has a leader or serves, or whose
// agent sees one: then nothing is restored. A member that is no candidate
// and is not known to hold nothing (a learner, declared lost, a data dir
// verified gone) is Unknown: it may be newer, and commands wait for it.
func Choose(members []Member, quorum bool, now time.Time) Choice {
	if quorum {
		return Choice{Refused: "the cluster has a quorum: nothing to restore (a restore would throw away a working cluster)", Members: members}
	}
	for _, m := range members {
		if r := quorumSign(m); r != "" {
			return Choice{Refused: r + ": a quorum exists, maybe beyond a partition from here; a restore would split the cluster", Members: members}
		}
	}
	var cands, others []Member
	var unknown []string
	for _, m := range members {
		m.Problem = problem(m, now)
		switch {
		case m.Problem == "":
			cands = append(cands, m)
		case !holdsNothing(m):
			unknown = append(unknown, m.Name)
			others = append(others, m)
		default:
			others = append(others, m)
		}
	}
	slices.SortStableFunc(cands, better)
	c := Choice{Members: append(cands, others...), Unknown: unknown}
	if len(cands) == 0 {
		c.Refused = "no member has data known to be intact: restore from a snapshot (docs/runbooks/README.md, From a snapshot)"
		return c
	}
	best := cands[0]
	c.Survivor = &best
	c.Why = why(best, cands[1:])
	c.Lost = lost(best, c.Members, unknown)
	return c
}

// quorumSign says what shows m is in a quorum, "" when nothing does.
func quorumSign(m Member) string {
	switch {
	case m.Source == FromEtcd && m.Leader != 0:
		return fmt.Sprintf("%s's etcd has a leader (%x)", m.Name, m.Leader)
	case m.Serving:
		return fmt.Sprintf("%s's agent says its etcd serves", m.Name)
	case m.QuorumSeen:
		return fmt.Sprintf("%s's agent sees a quorum", m.Name)
	}
	return ""
}

// gone are the data dir verdicts that hold no data.
var gone = []string{"missing", "empty", "not-a-directory", "corrupt", "foreign", "stale"}

// holdsNothing: m is known to hold nothing a restore could keep.
func holdsNothing(m Member) bool {
	return m.IsLearner || m.DeclaredLost && m.Source == "" ||
		slices.Contains(gone, m.DataDir) && (m.DataDirVerified || m.DataDir == "missing" || m.DataDir == "empty")
}

// rank is how far m's log goes that a restore from it keeps.
func rank(m Member) uint64 { return max(m.Commit, m.Applied) }

// problem says why m is no candidate, "" when it is one.
func problem(m Member, now time.Time) string {
	if m.IsLearner {
		return "a learner: it cannot lead the restored cluster"
	}
	if m.Source == FromEtcd {
		if slices.Contains(gone, m.DataDir) {
			// Its etcd serves from files deleted under it: stopped, they
			// are gone. A snapshot of it first (etcdctl snapshot save).
			return "its etcd runs, but its agent says its data dir is " + m.DataDir + ": take a snapshot of it first"
		}
		return ""
	}
	if m.DataDir == "" {
		if m.DeclaredLost {
			return "declared lost (--lost)"
		}
		return "nothing reported: its etcd does not answer and no agent reported on its data dir"
	}
	if !m.ReportedAt.IsZero() && now.Sub(m.ReportedAt) > StaleAfter {
		return fmt.Sprintf("its agent's report is %s old", now.Sub(m.ReportedAt).Round(time.Second))
	}
	// in-use: etcd holds it but does not serve (restarted without a
	// quorum); its agent read the WAL.
	if m.Source != FromDataDir || m.DataDir != "ok" && m.DataDir != "in-use" {
		if m.Note != "" {
			return "data dir " + m.DataDir + ": " + m.Note
		}
		return "data dir " + m.DataDir
	}
	return ""
}

// better orders candidates: the one whose log keeps more first.
func better(a, b Member) int {
	if c := cmp.Compare(rank(b), rank(a)); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Term, a.Term); c != 0 {
		return c
	}
	if a.Source != b.Source {
		if a.Source == FromEtcd {
			return -1
		}
		return 1
	}
	return cmp.Compare(a.Name, b.Name)
}

func why(best Member, rest []Member) string {
	s := fmt.Sprintf("%s has committed up to raft index %d (term %d, from its %s)", best.Name, rank(best), best.Term, best.Source)
	if len(rest) == 0 {
		return s + "; it is the only member with intact data"
	}
	var b []string
	for _, m := range rest {
		b = append(b, fmt.Sprintf("%s %d (term %d, %s)", m.Name, rank(m), m.Term, m.Source))
	}
	return s + "; the other candidates: " + strings.Join(b, ", ")
}

// lost says what a restore from best loses: the entries other candidates
// committed beyond it (none: it is the best), and whatever lost members
// acknowledged after its commit index, which nobody can see now.
func lost(best Member, members []Member, unknown []string) string {
	s := fmt.Sprintf("every write committed after raft index %d that only lost members kept", rank(best))
	if best.LastIndex > rank(best) {
		s += fmt.Sprintf("; %s's own log runs on to index %d: those entries are dropped (the last ones may have been committed, their commit not yet on its disk)", best.Name, best.LastIndex)
	}
	behind := 0
	for _, m := range members {
		if m.Name != best.Name && m.Problem == "" && rank(m) <= rank(best) {
			behind++
		}
		if m.Name != best.Name && m.Problem == "" && m.LastIndex > rank(best) {
			s += fmt.Sprintf("; %s's log runs to index %d, beyond it: check it is not newer", m.Name, m.LastIndex)
		}
	}
	if behind > 0 {
		s += fmt.Sprintf("; %d other candidate(s) are behind it and lose nothing it has", behind)
	}
	if len(unknown) > 0 {
		s += fmt.Sprintf("; not known: %s (if one's data is intact and newer, restore from it instead)", strings.Join(unknown, ", "))
	}
	return s
}
