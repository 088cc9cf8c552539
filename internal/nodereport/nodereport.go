// Package nodereport is what the agent tells people through its Node object
// (docs/design.md §7): the manual recovery trigger it reads from the Node's
// annotations, the outcome it writes back (etcd-agent.io/last-recovery), and
// the Events it records on the Node so that `kubectl describe node` shows
// what the agent did and why.
//
// Triggering a recovery by hand, in one command so that the agent never sees
// the trigger without its dry-run flag:
//
//	kubectl annotate node cp-2 etcd-agent.io/recover=rejoin etcd-agent.io/recover-dry-run=true
package nodereport

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Node annotations.
const (
	// AnnotationRecover is the manual trigger; the only accepted value is
	// ActionRejoin. The agent removes it once it has handled the request.
	AnnotationRecover = "etcd-agent.io/recover"
	// AnnotationRecoverDryRun "true" asks for the plan only.
	AnnotationRecoverDryRun = "etcd-agent.io/recover-dry-run"
	// AnnotationLastRecovery holds the JSON of the last LastRecovery.
	AnnotationLastRecovery = "etcd-agent.io/last-recovery"
	// AnnotationStatus is the agent's one-line view of its member.
	AnnotationStatus = "etcd-agent.io/status"
	// AnnotationMoveTo on the Node of a static-pod member asks its agent
	// to move the member to the named node (`etcd-agent move`); the dry-run
	// flag is AnnotationRecoverDryRun's.
	AnnotationMoveTo = "etcd-agent.io/move-to"
	// AnnotationDecommission on a Node (any value) says its etcd member is
	// being taken away on purpose: a manifest removed then is never put
	// back from the agent's checkpoint.
	AnnotationDecommission = "etcd-agent.io/decommission"
	// AnnotationMoveFrom, with AnnotationRecover=ActionMoveIn, is the
	// source agent's request to the target's: "<node>/<member ID hex>",
	// the member this node's member is added to replace.
	AnnotationMoveFrom = "etcd-agent.io/move-from"
)

// ActionMoveIn is the request a move's source agent puts on the target
// Node (never a person: use etcd-agent move).
const ActionMoveIn = "move-in"

// ActionRejoin re-creates the local member from its peers (docs/design.md §6).
const ActionRejoin = "rejoin"

// Event reasons.
const (
	ReasonRecoveryStarted   = "RecoveryStarted"
	ReasonRecoveryRefused   = "RecoveryRefused"
	ReasonRecoverySucceeded = "RecoverySucceeded"
	ReasonRecoveryFailed    = "RecoveryFailed"
	ReasonMemberLost        = "MemberLost"
	// ReasonHashMismatch: verify found voters with different HashKV.
	ReasonHashMismatch = "HashMismatch"
	// ReasonMemberRestarted: a failed attempt put back the member it had
	// stopped (never removed, data intact); ReasonMemberLeftStopped: it
	// could not, and says why (plan.DecidePutBack).
	ReasonMemberRestarted   = "MemberRestarted"
	ReasonMemberLeftStopped = "MemberLeftStopped"
	// ReasonSeedFallback: seed mode was refused and the rejoin goes on in
	// raft mode (the message names the seeding reason).
	ReasonSeedFallback = "SeedFallback"
	// ReasonDataDirSkeletonRestored: the data dir was wiped while its
	// member serves; the agent put its empty, marked directory skeleton
	// back so that etcd's purge does not end the member
	// (plan.DecideSkeleton).
	ReasonDataDirSkeletonRestored = "DataDirSkeletonRestored"
	// ReasonQuarantinePruned: a quarantined copy beyond --quarantine-keep
	// was deleted (the message names it and why it was redundant).
	ReasonQuarantinePruned = "QuarantinePruned"
	// ReasonUntakenBackupRemoved: a backup a killed agent streamed, that
	// its journal never took, was deleted at the next start.
	ReasonUntakenBackupRemoved = "UntakenBackupRemoved"
	// ReasonLearnerRolledBack: a stranded learner (its owner's Lease
	// expired, no progress for the stall timeout) was removed.
	ReasonLearnerRolledBack = "RecoveryLearnerRolledBack"
	// ReasonMemberMoved: a move-out finished; the member serves from its
	// new node.
	ReasonMemberMoved = "MemberMoved"
	// ReasonManifestRestored: the member's static-pod manifest vanished
	// (not parked by the agent) and its checkpoint was put back.
	ReasonManifestRestored = "ManifestRestored"
	// ReasonRecoveryProgress: a long step of a recovery (a stream, the
	// snapshot receive, the catch-up) has a rate: how far it is and its
	// ETA, once per step; ReasonRecoveryStepStalled: it stopped moving
	// (once per stall), and since when.
	ReasonRecoveryProgress    = "RecoveryProgress"
	ReasonRecoveryStepStalled = "RecoveryStepStalled"
)

// LastRecovery.Result values.
const (
	ResultSucceeded = "succeeded"
	ResultFailed    = "failed"
	ResultRefused   = "refused"
)

// LastRecovery is the outcome of the last recovery request, automatic or
// manual, as written to AnnotationLastRecovery.
type LastRecovery struct {
	Request    string    `json:"request"` // e.g. "rejoin", "rejoin (dry run)", "automatic"
	Result     string    `json:"result"`  // ResultSucceeded, ResultFailed or ResultRefused
	Reason     string    `json:"reason,omitempty"`
	Phase      string    `json:"phase,omitempty"` // the step reached (or failed at)
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	Message    string    `json:"message,omitempty"`
	// RejoinMode is how the learner got its data ("seed" or "raft"), and
	// SeedFallback why seed mode fell back to raft, once the data dir was
	// prepared.
	RejoinMode   string `json:"rejoinMode,omitempty"`
	SeedFallback string `json:"seedFallback,omitempty"`
	// MoveFrom (a move-in) echoes the request's AnnotationMoveFrom, and
	// MemberID is the member it added: the source retires its member only
	// for its own ask's success, and only once that member serves.
	MoveFrom string `json:"moveFrom,omitempty"`
	MemberID string `json:"memberID,omitempty"`
	// Steps say what the long steps did (the streams, the catch-up: how
	// much in how long), as the journal has them.
	Steps []string `json:"steps,omitempty"`
}

// LastRecoveryFrom reads AnnotationLastRecovery; ok is false when the Node
// has none.
func LastRecoveryFrom(annotations map[string]string) (lr LastRecovery, ok bool, err error) {
	v, ok := annotations[AnnotationLastRecovery]
	if !ok {
		return LastRecovery{}, false, nil
	}
	if err := json.Unmarshal([]byte(v), &lr); err != nil {
		return LastRecovery{}, true, fmt.Errorf("annotation %s is not valid JSON: %w", AnnotationLastRecovery, err)
	}
	return lr, true, nil
}

// Request is a manual recovery request read from the Node.
type Request struct {
	Action string // ActionRejoin or ActionMoveIn
	DryRun bool
	// From and Replaces (ActionMoveIn): AnnotationMoveFrom's value as the
	// source wrote it (echoed in LastRecovery.MoveFrom) and the member ID
	// it names.
	From     string
	Replaces uint64
	// Target (ActionMoveAway) is the node a pod member moves to.
	Target string
}

// ParseRequest reads the trigger annotations. ok is false when there is no
// request: AnnotationRecover absent (a dry-run flag alone is not a request).
// err is set, with ok true, for a value it does not understand, so the
// caller can refuse the request and say which values are accepted.
func ParseRequest(annotations map[string]string) (req Request, ok bool, err error) {
	action, ok := annotations[AnnotationRecover]
	if !ok {
		return Request{}, false, nil
	}
	switch action {
	case ActionRejoin:
	case ActionMoveIn:
		v := annotations[AnnotationMoveFrom]
		_, id, err := ParseMoveFrom(v)
		if err != nil {
			return Request{Action: action}, true, err
		}
		req.From, req.Replaces = v, id
	default:
		return Request{Action: action}, true, fmt.Errorf("annotation %s=%q is not understood: the accepted value is %q",
			AnnotationRecover, action, ActionRejoin)
	}
	req.Action = action
	switch dry, set := annotations[AnnotationRecoverDryRun]; {
	case !set || dry == "false":
	case dry == "true":
		req.DryRun = true
	default:
		// Refuse rather than guess: a typo must not turn a dry run into a
		// real membership change.
		return req, true, fmt.Errorf("annotation %s=%q is not understood: the accepted values are \"true\" and \"false\"",
			AnnotationRecoverDryRun, dry)
	}
	return req, true, nil
}

// String is how a request is named in LastRecovery.Request and Events.
func (r Request) String() string {
	if r.DryRun {
		return r.Action + " (dry run)"
	}
	return r.Action
}

// MoveFrom is AnnotationMoveFrom's value: "<node>/<member ID hex>/<ask>",
// ask naming this asking (the source's clock, base 36 nanoseconds), so an
// answer is matched to the ask that caused it, never to an older one.
func MoveFrom(node string, memberID uint64, askedAt time.Time) string {
	return MoveSource(node, memberID) + strconv.FormatInt(askedAt.UnixNano(), 36)
}

// MoveSource is the "<node>/<member ID hex>/" prefix of every ask for that
// member's move.
func MoveSource(node string, memberID uint64) string { return fmt.Sprintf("%s/%x/", node, memberID) }

// ParseMoveFrom reads AnnotationMoveFrom.
func ParseMoveFrom(v string) (node string, memberID uint64, err error) {
	parts := strings.Split(v, "/")
	if len(parts) == 3 && parts[2] != "" {
		memberID, err = strconv.ParseUint(parts[1], 16, 64)
	}
	if len(parts) != 3 || parts[2] == "" || err != nil || parts[0] == "" || memberID == 0 {
		return "", 0, fmt.Errorf("annotation %s=%q is not understood: want <node>/<member ID in hex>/<ask>", AnnotationMoveFrom, v)
	}
	return parts[0], memberID, nil
}
