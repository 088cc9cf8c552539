// Package record holds the agent's records as plain data: a recovery's
// journal record and a member's pin. Package plan decides on them without
// any I/O; packages journal and pin keep them on disk.
package record

import (
	"encoding/json"
	"strconv"
	"time"
)

// Phase is the last step a recovery completed.
type Phase string

// Phases, in order.
const (
	PhaseNone          Phase = ""
	PhaseStarted       Phase = "started"        // Lease acquired, recovery opened
	PhaseStopped       Phase = "stopped"        // local member stopped, data dir quarantined
	PhaseSnapshotted   Phase = "snapshotted"    // pre-change backup streamed and verified
	PhaseRemoved       Phase = "removed"        // old member ID removed (or already gone)
	PhaseLearnerAdded  Phase = "learner-added"  // new learner in the member list
	PhasePrepared      Phase = "prepared"       // data dir ready for the learner
	PhaseMemberStarted Phase = "member-started" // local member started as the learner
	PhasePromoted      Phase = "promoted"       // learner promoted to voter
	PhaseVerified      Phase = "verified"       // healthy, HashKV equal
	PhaseDone          Phase = "done"           // closed; see Result
)

var order = []Phase{PhaseNone, PhaseStarted, PhaseStopped, PhaseSnapshotted, PhaseRemoved, PhaseLearnerAdded,
	PhasePrepared, PhaseMemberStarted, PhasePromoted, PhaseVerified, PhaseDone}

// AtLeast reports whether p is q or later.
func (p Phase) AtLeast(q Phase) bool { return index(p) >= index(q) }

func index(p Phase) int {
	for i, o := range order {
		if o == p {
			return i
		}
	}
	return -1
}

// MemberID is an etcd member ID, written in hex as etcdctl shows it (a
// JSON number would lose precision in jq and friends).
type MemberID uint64

// MarshalJSON writes the ID as a hex string.
func (id MemberID) MarshalJSON() ([]byte, error) {
	if id == 0 {
		return []byte(`""`), nil
	}
	return json.Marshal(strconv.FormatUint(uint64(id), 16))
}

// UnmarshalJSON reads a hex string; on an error the ID is left as it was
// (strconv's answer for a bad string, 0 or the maximum, is no member's ID).
func (id *MemberID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		*id = 0
		return nil
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return err
	}
	*id = MemberID(v)
	return nil
}

// Results of a closed recovery.
const (
	ResultSucceeded = "succeeded"
	ResultFailed    = "failed"
	ResultRefused   = "refused"
)

// KindRollbackLearner is a Record's Kind for the rollback of a stranded
// learner (another agent's, whose Lease expired): only LearnerID is
// removed, the local member is not touched.
const KindRollbackLearner = "rollback-learner"

// KindRestoreClientURLs is a Record's Kind for the restart of the local
// member, a serving voter, on the client URLs a learner's start set aside,
// when the rejoin that set them aside ended before it could (plan's
// decideIdleRestore).
const KindRestoreClientURLs = "restore-client-urls"

// Record is one member's current (or last) recovery.
type Record struct {
	ID      string `json:"id"`
	Member  string `json:"member"`
	Node    string `json:"node"`
	Request string `json:"request"` // "auto" or the manual annotation value
	// Kind is "" for a rejoin of the local member, KindRollbackLearner for
	// the rollback of the stranded learner LearnerID, KindRestoreClientURLs
	// for the restart of the member on its own client URLs.
	Kind      string    `json:"kind,omitempty"`
	LearnerID MemberID  `json:"learnerID,omitempty"`
	Phase     Phase     `json:"phase"`
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`

	// A move's: MoveTarget (a move-out) is the node our member moved to;
	// MoveFrom (a move-in) is the source's ask (its move-from annotation);
	// MoveMemberID is the member replaced (move-in) or the member that
	// replaced ours (move-out).
	MoveTarget   string   `json:"moveTarget,omitempty"`
	MoveFrom     string   `json:"moveFrom,omitempty"`
	MoveMemberID MemberID `json:"moveMemberID,omitempty"`
	// A pod move's (move-away): the member's claim (UID) and PV when it
	// began, and when its claim was deleted (from then on the member's
	// future is on the target, whatever this journal's result).
	MoveClaimUID    string    `json:"moveClaimUID,omitempty"`
	MovePV          string    `json:"movePV,omitempty"`
	ClaimReleasedAt time.Time `json:"claimReleasedAt,omitzero"`

	OldMemberID MemberID `json:"oldMemberID"`
	NewMemberID MemberID `json:"newMemberID"`
	PeerURLs    []string `json:"peerURLs"`

	// StopAttemptedAt is when the stop was first tried: from then on the
	// member may be down by our hand, and rule 6's re-check no longer asks
	// whether it came back.
	StopAttemptedAt time.Time `json:"stopAttemptedAt,omitzero"`
	// PutBack says what a failed attempt did with the member it stopped
	// (plan.DecidePutBack): restarted as it was, or left stopped and why.
	PutBack string `json:"putBack,omitempty"`

	QuarantinePath string `json:"quarantinePath,omitempty"`
	// WALQuarantinePath is where a dedicated WAL dir was set aside (on its
	// own filesystem, beside it).
	WALQuarantinePath string `json:"walQuarantinePath,omitempty"`
	SnapshotPath      string `json:"snapshotPath,omitempty"`
	SnapshotBytes     int64  `json:"snapshotBytes,omitempty"`
	SnapshotSHA256    string `json:"snapshotSHA256,omitempty"`
	SnapshotSource    string `json:"snapshotSource,omitempty"`
	// SnapshotClusterID is the cluster the pre-change backup was streamed
	// from (the observation's, pinned, at that moment).
	SnapshotClusterID MemberID `json:"snapshotClusterID,omitempty"`
	// BackupStreaming is where this attempt's latest pre-change backup
	// streams (or streamed) to, journaled before its stream starts. A file
	// there that SnapshotPath does not name was never taken (the agent was
	// killed between the stream's rename and the journal's record of it):
	// the next start removes it.
	BackupStreaming string `json:"backupStreaming,omitempty"`
	// BackupSeeds: the pre-change backup may seed this attempt's learner.
	// Set when this attempt streams it; cleared when the attempt resumes
	// after it (the Lease may have been another agent's meanwhile, whose
	// changes, a learner added and removed again, a fresh member list does
	// not show but the seeded learner would replay) and when a stranded
	// learner is removed.
	BackupSeeds bool `json:"backupSeeds,omitempty"`
	// StoreKey is the snapshot's object in the snapshot store (a move's).
	StoreKey string `json:"storeKey,omitempty"`

	// RejoinMode is how the learner's data dir was prepared: "raft" or
	// "seed". SeedFallback is why seed mode fell back to raft mode (a
	// peerseed.SeedReason) and SeedDetail the error; SeedIndex, SeedTerm
	// and SeedSource describe a seeded data dir.
	RejoinMode   string `json:"rejoinMode,omitempty"`
	SeedFallback string `json:"seedFallback,omitempty"`
	SeedDetail   string `json:"seedDetail,omitempty"`
	SeedIndex    uint64 `json:"seedIndex,omitempty"`
	SeedTerm     uint64 `json:"seedTerm,omitempty"`
	SeedSource   string `json:"seedSource,omitempty"`

	// Learner catch-up progress, for the stall timeout.
	LearnerApplied    uint64    `json:"learnerApplied,omitempty"`
	LearnerProgressAt time.Time `json:"learnerProgressAt,omitzero"`
	// Steps say what the long steps did, in the order they ended
	// (internal/progress: "pre-change stream: 1.2 GiB in 7.5s (160 MiB/s)").
	Steps []string `json:"steps,omitempty"`

	// ClientURLsAside is the private client URL the learner listened on
	// (a 3.5 learner, plan.asideClientURLs); ClientURLsRestoredAt when the
	// member, promoted, was restarted on its own.
	ClientURLsAside      string    `json:"clientURLsAside,omitempty"`
	ClientURLsRestoredAt time.Time `json:"clientURLsRestoredAt,omitzero"`

	PhaseTimes map[Phase]time.Time `json:"phaseTimes,omitempty"`

	// RequestClearPending: this recovery succeeded and answered the manual
	// request made before or during it, but the trigger could not be
	// cleared from the Node; until it is, a trigger handed in is that one
	// (never executed twice, also after a restart of the agent).
	RequestClearPending bool `json:"requestClearPending,omitempty"`

	Result     string    `json:"result,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`

	// Failures counts consecutive failed attempts (reset on success), for backoff.
	Failures      int       `json:"failures,omitempty"`
	LastFailureAt time.Time `json:"lastFailureAt,omitzero"`
}

// Active reports whether a recovery is open (begun and not closed).
func (r Record) Active() bool { return r.Phase != PhaseNone && r.Phase != PhaseDone }

// Advance records that phase p completed at now.
func (r *Record) Advance(p Phase, now time.Time) {
	r.Phase, r.UpdatedAt = p, now
	if r.PhaseTimes == nil {
		r.PhaseTimes = map[Phase]time.Time{}
	}
	r.PhaseTimes[p] = now
}
