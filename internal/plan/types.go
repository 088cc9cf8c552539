// Package plan is the agent's decision core: Decide(Input, Config) says what,
// if anything, is safe to do next, or refuses with a reason code. It holds
// every safety rule of the design (docs/design.md §4) in one place and does no I/O:
// time, the observation, the Lease and the journal are inputs, as ticks and
// messages are for go.etcd.io/raft's state machine. The executor (package
// heal) does what the Decision says and calls Decide again.
package plan

import (
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Action is what to do next.
type Action string

// Actions. Each membership-changing one (RemoveMember, AddLearner, Promote,
// RemoveStalledLearner) is done only after the executor has confirmed it
// still holds the Lease (fencing) on a fresh observation.
const (
	Nothing              Action = "nothing"        // all is well, or wait (Reason says why)
	Refuse               Action = "refuse"         // a recovery is wanted but not safe or not allowed (Reason)
	Begin                Action = "begin"          // acquire the Lease and open (or resume) the journal
	StopMember           Action = "stop-member"    // stop the local member and quarantine its data dir
	TakeSnapshot         Action = "snapshot"       // stream the pre-change backup from a follower
	RemoveMember         Action = "remove-member"  // MemberRemove the old ID
	AddLearner           Action = "add-learner"    // MemberAddAsLearner with our peer URLs
	AdoptLearner         Action = "adopt-learner"  // a learner with our peer URLs exists (an add that timed out but was applied): record its ID
	PrepareDataDir       Action = "prepare"        // make the data dir ready for the learner
	StartMember          Action = "start-member"   // start the local member against the existing cluster
	WaitCatchUp          Action = "wait-catch-up"  // the learner is catching up
	Promote              Action = "promote"        // MemberPromote the learner
	RemoveStalledLearner Action = "remove-learner" // the learner made no progress: remove it, fail cleanly
	Verify               Action = "verify"         // check health and HashKV across voters
	Finish               Action = "finish"         // release the Lease, close the journal with Result
	// RollbackLearner: no recovery is open and a stranded learner (not
	// ours, no live Lease, no progress for the stall timeout) blocks ours:
	// acquire the Lease and open a rollback record for MemberID (docs/design.md
	// §5: the new holder resumes or rolls back).
	RollbackLearner Action = "rollback-learner"
	// RemoveStrandedLearner: the rollback record's step, with the Lease
	// held and re-checked on a fresh observation: MemberRemove MemberID.
	RemoveStrandedLearner Action = "remove-stranded-learner"
	// RestoreClientURLs: the member, promoted, was started with its client
	// URLs set aside (a 3.5 learner: Decision.AsideClientURLs); its
	// manifest gets them back, and the kubelet restarts it on them.
	RestoreClientURLs Action = "restore-client-urls"
	// BeginRestoreClientURLs: no recovery is open and the local member, a
	// serving voter, still has its client URLs set aside (the rejoin that
	// set them aside ended first): acquire the Lease and open a record of
	// record.KindRestoreClientURLs for MemberID.
	BeginRestoreClientURLs Action = "begin-restore-client-urls"
)

// Reason is a refusal or wait code; exported as a metric label, an Event and in status.
type Reason string

// Reason codes.
const (
	ReasonNone              Reason = ""
	ReasonMajorityLost      Reason = "majority-lost"
	ReasonWouldLoseQuorum   Reason = "would-lose-quorum"
	ReasonLearnerPresent    Reason = "learner-present"
	ReasonLeaseHeldByOther  Reason = "lease-held-by-other"
	ReasonAPIUnavailable    Reason = "api-unavailable"
	ReasonAmbiguousIdentity Reason = "ambiguous-identity"
	ReasonInGracePeriod     Reason = "in-grace-period"
	ReasonMemberHealthy     Reason = "member-healthy"
	ReasonDryRun            Reason = "dry-run"
	ReasonDiskFull          Reason = "disk-full"
	ReasonBadRequest        Reason = "bad-request"
	ReasonBackoff           Reason = "backoff"
	ReasonNoSnapshotSource  Reason = "no-snapshot-source"
	ReasonLearnerStalled    Reason = "learner-stalled"
	ReasonLearnerGone       Reason = "learner-gone"
	ReasonAutoHealDisabled  Reason = "auto-heal-disabled"
	ReasonLeaseLost         Reason = "lease-lost"
	ReasonNotNeeded         Reason = "not-needed"
	ReasonForeignCluster    Reason = "foreign-cluster"
	// The learner's etcd minor would be refused by etcd or break the
	// cluster's upgrade rule (checkVersions).
	ReasonLearnerVersionBelowCluster Reason = "learner-version-below-cluster"
	ReasonVersionSkew                Reason = "version-skew"
	ReasonLearnerVersionUnknown      Reason = "learner-version-unknown"
	ReasonDowngradeInProgress        Reason = "downgrade-in-progress"
	// ReasonHashMismatch: verify found comparable voters with different
	// HashKV (JudgeHashes); the attempt fails, a divergent voter serves.
	ReasonHashMismatch Reason = "hash-mismatch"
	// ReasonDataDirMountPoint: the data dir is a volume's root that cannot
	// be set aside (DataDirDisposal: a file mounted over its path).
	ReasonDataDirMountPoint Reason = "data-dir-mount-point"
	// ReasonWALDirMountPoint: the dedicated WAL dir is a mount point
	// (WALDirDisposal): etcd cannot create a new member's WAL there.
	ReasonWALDirMountPoint Reason = "wal-dir-mount-point"
	// ReasonWALDirSymlink: the dedicated WAL dir is a symlink
	// (WALDirDisposal): etcd would replace the link by a dir of its own.
	ReasonWALDirSymlink Reason = "wal-dir-symlink"
	// ReasonDataDirLinkDangling: the data dir is a symlink whose target is
	// missing (DataDirDisposal): an unmounted disk holds the member's data.
	ReasonDataDirLinkDangling Reason = "data-dir-link-dangling"
	// ReasonLearnerStranded: a learner no agent heals any more (no live
	// Lease, no progress for the stall timeout) is to be rolled back.
	ReasonLearnerStranded Reason = "learner-stranded"
	// ReasonLearnerRolledBack: a rollback record closed with the stranded
	// learner removed.
	ReasonLearnerRolledBack Reason = "learner-rolled-back"
	// ReasonNotAMember: the local member was never a member of the cluster
	// (nothing pinned, not in the list): only a move adds it.
	ReasonNotAMember Reason = "not-a-member"
	// ReasonNeverStarted: the local member is in the list but has never
	// started (it never published its client URLs) and its data dir is
	// missing or empty: nothing is lost, it is waited for (a bootstrap held
	// at its gate), never replaced unasked.
	ReasonNeverStarted Reason = "never-started"
	// ReasonMovedAway: the member was moved to another node (a move-out
	// succeeded): never healed here again unasked.
	ReasonMovedAway Reason = "moved-away"
	// ReasonManifestMissing: the member's static-pod manifest is gone and
	// the agent did not park it (deleted by hand, by accident): nothing
	// can stop or start the member; the agent puts its checkpoint back
	// (DecideManifestRestore) or a person acts.
	ReasonManifestMissing Reason = "manifest-missing"
	// The manifest restore's reasons not to put the checkpoint back
	// (DecideManifestRestore).
	ReasonDecommissioned     Reason = "decommissioned"
	ReasonMemberRemoved      Reason = "member-removed"
	ReasonMembershipUnknown  Reason = "membership-unknown"
	ReasonInRestoreDelay     Reason = "in-restore-delay"
	ReasonNoCheckpoint       Reason = "no-checkpoint"
	ReasonDataDirUnusable    Reason = "data-dir-unusable"
	ReasonRecoveryInProgress Reason = "recovery-in-progress"
	ReasonMemberRunning      Reason = "member-running"
	ReasonRestoreLimit       Reason = "restore-limit"
	ReasonRestoreLogUnusable Reason = "restore-log-unusable"
)

// RefusalReasons lists the codes a recovery can be refused with (for
// initialising the refusal counter's series).
func RefusalReasons() []Reason {
	return []Reason{ReasonMajorityLost, ReasonWouldLoseQuorum, ReasonLearnerPresent, ReasonLeaseHeldByOther,
		ReasonAPIUnavailable, ReasonAmbiguousIdentity, ReasonMemberHealthy, ReasonDryRun, ReasonDiskFull,
		ReasonBadRequest, ReasonNoSnapshotSource, ReasonForeignCluster, ReasonDataDirMountPoint, ReasonWALDirMountPoint, ReasonWALDirSymlink, ReasonDataDirLinkDangling,
		ReasonLearnerVersionBelowCluster, ReasonVersionSkew, ReasonLearnerVersionUnknown, ReasonDowngradeInProgress,
		// The steward's (DecideSteward), for a member on a lost node.
		ReasonNodeReady, ReasonInGracePeriod, ReasonMemberServing, ReasonStewardNotHealthy, ReasonNotGated, ReasonAutoHealDisabled,
		// A move's (DecideMove, move-in, move-out).
		ReasonTargetNotReady, ReasonTargetHasMember, ReasonNoSnapshotStore, ReasonSnapshotStoreUnreached,
		ReasonMemberNotHealthy, ReasonMoveFailed, ReasonMoveTimedOut, ReasonNoFreePV, ReasonTargetPVUnusable,
		ReasonTargetInsufficientResources, ReasonTargetViolatesSpread, ReasonTargetHostPortInUse, ReasonTargetViolatesPodAffinity,
		// A static pod whose manifest is gone (deleted by hand).
		ReasonManifestMissing,
		// A step's shell, right before it acts (StepRefusal).
		ReasonMemberDataMoved}
}

// Request is a manual trigger (Node annotation or `etcd-agent recover`).
type Request struct {
	Action string // "rejoin", ActionMoveIn, ActionMoveOut or ActionMoveAway
	DryRun bool
	// Replaces (move-in) is the member the local one is added to replace;
	// Target (move-out) is the name of the member that replaced ours;
	// (move-away) the node the pod member moves to.
	Replaces uint64
	MoveFrom string
	// Replacement (move-out) is the ID of the member that replaced ours,
	// on node Target.
	Replacement uint64
	Target      string
}

// Input is everything Decide looks at.
type Input struct {
	Now     time.Time
	Obs     observation.Observation
	Verdict memberstate.Verdict
	// Request is a manual request; nil for the automatic path.
	Request *Request
	// Journal is the member's journal (zero when none).
	Journal record.Record
	// APIAvailable: the Kubernetes API answered (no API, no Lease, no action).
	APIAvailable bool
	// LeaseHeld: we hold the recovery Lease (confirmed against the API).
	LeaseHeld bool
	// LeaseHolder names another holder of an unexpired Lease ("" if free).
	LeaseHolder string
	// LeaseFreeSince is since when this agent has seen the Lease free or
	// expired at every look, without a break (zero: not seen so). A
	// stranded learner is rolled back only after a stall timeout of it: a
	// live owner's Lease may lapse for a moment (its API briefly away).
	LeaseFreeSince time.Time
	// NeverAMember: the local member is not in the list, nothing is pinned
	// for it, and no Node's record names it: it never was a member (a
	// manifest placed for a move's target). Adding it would grow the
	// cluster, so only a request (move-in) does.
	NeverAMember bool
	// FreeBytes is the free space where the snapshot and quarantine go.
	FreeBytes uint64
	// DataDirVolumeRoot: the data dir is a volume's root, a mount point
	// or a PV's path (DataDirDisposal: never renamed).
	DataDirVolumeRoot bool
	// DataDirSymlink: the data dir's path is a symlink (DataDirDisposal:
	// kept, with its target).
	DataDirSymlink bool
	// WALDirDedicated: etcd runs with --wal-dir; WALDirMountPoint,
	// WALDirSymlink: that dir is a mount point, a symlink (WALDirDisposal).
	WALDirDedicated, WALDirMountPoint, WALDirSymlink bool
	// WALDirOtherFS: that dir is on a filesystem of neither the data dir
	// nor the quarantine; WALDirFreeBytes is then its free space.
	WALDirOtherFS   bool
	WALDirFreeBytes uint64
	// DataDirOtherFS: the data dir is on another filesystem than the
	// quarantine (a dedicated disk mounted at it); DataDirFreeBytes is then
	// that filesystem's free space (see AttemptBytesNeeded).
	DataDirOtherFS   bool
	DataDirFreeBytes uint64
	// Backups says where the newest snapshots are (the quarantine), for the
	// refusals that leave a restore to a person.
	Backups string
	// Learners is every learner's progress as the watchdog remembers it
	// across polls (memberstate.LearnerTracker): the stranded-learner rule's
	// clock. A learner without an entry has no clock yet and is never
	// stranded.
	Learners []memberstate.LearnerProgress
	// MoveSourceGone (a move-in) says why the move's source no longer asks
	// for it (its Node's move-to does not name this node; "" = it asks);
	// MoveSourceUnread why that could not be read now.
	MoveSourceGone   string
	MoveSourceUnread string
	// Claim is what the API shows of a pod member's move (a move-away
	// request or journal); nil otherwise.
	Claim *ClaimFacts
	// ManifestMissing: a static pod's manifest is neither in the kubelet's
	// dir nor parked by the agent: no step could stop or start the member.
	ManifestMissing bool
	// LearnerVersion is the etcd version the member will run once added
	// back: its manifest's (or pod's) image tag ("3.5.36"); "" unknown (a
	// digest-only image, an exec runtime). See checkVersions.
	LearnerVersion string
	// BackupStreamingFrom is the member a pre-change backup of this attempt
	// streams (or streamed, verified) from, begun during the stop under the
	// Lease; 0 when there is none or it failed.
	BackupStreamingFrom uint64
	// CanSetClientURLsAside: the runtime can start the learner with its
	// client URLs set aside (static pods); ClientURLsAside: the member's
	// manifest has them aside now (a learner's start did it).
	CanSetClientURLsAside, ClientURLsAside bool
}

// Config is the decision's tunables.
type Config struct {
	AutoHeal            bool
	DryRun              bool
	MaxLearnerLag       uint64
	LearnerStallTimeout time.Duration
	// RetryBackoff is the wait after a failed attempt, doubled per
	// consecutive failure up to MaxRetryBackoff.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// RejoinSeed: the learner's data dir is seeded from a streamed snapshot
	// (heal.RejoinSeed), which the free-space check counts.
	RejoinSeed bool
	// SnapshotStore: --snapshot-store is set (a move needs it).
	SnapshotStore bool
	// MoveDeadline bounds a pod move's wait for its member on the target,
	// from the release of its claim (--recovery-timeout; 0: 30 minutes):
	// past it the move closes failed, move-timed-out.
	MoveDeadline time.Duration
	// StoreOpens: the executor can open the snapshot store to fetch a
	// seed (ChooseSeed never picks the store otherwise).
	StoreOpens bool
	// NoStoreSeed (--seed-from-store=false), NoBackupSeed
	// (--seed-from-backup=false): ChooseSeed skips that source.
	NoStoreSeed, NoBackupSeed bool
	// StoreSeedKey is the stored snapshot a pod move named on the claim of
	// this member's pod ("" none): its rejoin seeds from it (ChooseSeed).
	StoreSeedKey string
}

// Decision is Decide's answer.
type Decision struct {
	Action Action `json:"action"`
	Reason Reason `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// MemberID is the member the action is about (to remove, to adopt, to promote).
	MemberID uint64 `json:"memberID,omitempty"`
	// SourceID is the member to stream the snapshot from (TakeSnapshot);
	// on StopMember, the member the pre-change backup may stream from
	// while the stop runs (0: none).
	SourceID uint64 `json:"sourceID,omitempty"`
	// Claim is the PVC a steward step (retain its PV, delete it) is about.
	Claim string `json:"claim,omitempty"`
	// AsideClientURLs (AddLearner, StartMember): start the learner with
	// its client URLs set aside (asideClientURLs).
	AsideClientURLs bool `json:"asideClientURLs,omitempty"`
	// Seed (PrepareDataDir) is the first source to seed the learner from
	// (ChooseSeed); the shell falls back from it in SeedSource's order.
	Seed SeedSource `json:"seed,omitempty"`
}

// Refused reports whether d refuses a wanted recovery.
func (d Decision) Refused() bool { return d.Action == Refuse }
