package plan

// RuleEntry is one line of the design's rule index (docs/design.md §4): a
// safety rule (ID "1".."10") or a part of the design with reason codes of
// its own ("rejoin", "gate", "manifest", "steward", "move"), the reason
// codes it answers with, and the tests that pin it. Every Reason of this
// package belongs to exactly one entry, and docs/design.md's table lists
// these entries as they are here (TestTheDesignsRuleTableIsTheCodes).
type RuleEntry struct {
	ID      string
	Name    string
	Reasons []Reason
	Tests   []string
}

// Rules is the index, in the order of docs/design.md §4.
var Rules = []RuleEntry{
	{"1", "never without quorum", []Reason{ReasonMajorityLost},
		[]string{"TestRefusesWhenMajorityLost", "TestMajorityLostMidRecoveryWaits"}},
	{"2", "remove only the lost member, keeping a quorum", []Reason{ReasonWouldLoseQuorum, ReasonMemberHealthy},
		[]string{"TestRefusesRemovalThatWouldLoseQuorum", "TestNeverActsOnHealthyMemberAutomatically", "TestManualRequestOnHealthyMemberNeedsSpareQuorum", "TestNeverRemovesServingOldMember"}},
	{"3", "add only as a learner, one at a time, of a version the cluster takes", []Reason{ReasonLearnerPresent, ReasonLearnerVersionBelowCluster,
		ReasonVersionSkew, ReasonLearnerVersionUnknown, ReasonDowngradeInProgress},
		[]string{"TestRefusesWhileAnotherLearnerExists", "TestAddLearnerOrAdopt", "TestVersionRuleRefusesALearnerTheClusterCannotTake"}},
	{"4", "promote by absolute lag; a stalled learner is removed", []Reason{ReasonLearnerStalled, ReasonLearnerGone, ReasonLearnerStranded, ReasonLearnerRolledBack},
		[]string{"TestPromoteByAbsoluteLag", "TestRemoveStalledLearner", "TestStrandedLearnerIsRolledBackByTheNextHolder"}},
	{"5", "one change at a time, under the Lease, fenced", []Reason{ReasonLeaseHeldByOther, ReasonAPIUnavailable, ReasonLeaseLost, ReasonRecoveryInProgress},
		[]string{"TestLeaseHeldByOther", "TestAPIUnavailable", "TestResumeNeedsLease", "TestPreStopReverification"}},
	{"6", "hysteresis: lost only after the grace, re-checked after the Lease", []Reason{ReasonInGracePeriod, ReasonNotNeeded, ReasonAutoHealDisabled},
		[]string{"TestInGracePeriodDoesNothing", "TestPreStopReverification", "TestAutoHealDisabled"}},
	{"7", "identity and one cluster", []Reason{ReasonAmbiguousIdentity, ReasonForeignCluster, ReasonNotAMember, ReasonNeverStarted},
		[]string{"TestAmbiguousIdentityRefused", "TestForeignClusterRefused", "TestVoterWithOurPeerURLNotOursFinishesAmbiguous", "TestANeverSeenMemberIsNotAddedUnasked"}},
	{"8", "never delete data", []Reason{ReasonDiskFull, ReasonDataDirMountPoint, ReasonWALDirMountPoint, ReasonWALDirSymlink, ReasonDataDirLinkDangling, ReasonMemberDataMoved},
		[]string{"TestDataDirDisposal", "TestDiskFull", "TestMountPointDataDirDecidedBeforeTheStop", "TestAWALDirAtAMountPointIsRefusedBeforeTheStop"}},
	{"9", "never a removed member's data under its old ID", []Reason{ReasonMovedAway, ReasonMemberRemoved, ReasonDecommissioned},
		[]string{"TestStartGate", "TestRejoinStepByStep", "TestAMovedMemberIsNeverHealedUnaskedAndItsRemovalNeedsAFreshList"}},
	{"10", "refusals are first-class", []Reason{ReasonDryRun, ReasonBadRequest, ReasonBackoff},
		[]string{"TestRefusedReportsRefusalsOnly", "TestDryRun", "TestBadRequestRefused", "TestBackoffAfterFailure", "TestDecideInvariants"}},
	{"rejoin", "the rejoin's source, a 3.5 learner's client URLs set aside, and verify (§6)", []Reason{ReasonNoSnapshotSource, ReasonHashMismatch},
		[]string{"TestPickSource", "TestOnlyA35LearnerStartsWithItsClientURLsAside", "TestAPromotedMemberGetsItsClientURLsBackWithoutLosingQuorum", "TestVerifyThenFinish", "TestJudgeHashes"}},
	{"gate", "the start gate: etcd starts only on data that is its member's (§6)", []Reason{GateDataDirOK, GateMemberExisted, GateHeldByAgent,
		GateClusterUnknown, GateForceNewCluster, GateAwaitingArm, GateLearnerStartFlags, GatePrepared, GateAwaitingAgent, GateNeverStarted, GateUnverified, GateWouldBootstrap,
		GatePinUnreadable, GateNeverSeen},
		[]string{"TestStartGate", "TestPinnedClusterUnreachableSaysRestoreIsAHumansCall", "TestAnUnpinnedPodMemberStartsOnItsDataOnlyAfterTheAgentReadItsRecord",
			"TestAForceNewClusterRequestIsUsedOnlyOnItsSurvivorWithoutAQuorum", "TestTheAgentArmsOnlyARequestItsGateCouldUse", "TestAnUnarmedRequestHoldsTheStartAWhileThenIsRefused"}},
	{"stop", "the fast stop ends etcd only with nothing to lose (§6 step 2)", []Reason{FastStopNow, FastStopDataOnDisk, FastStopRequestsInFlow,
		FastStopNotServed, FastStopLeader, FastStopServing, FastStopNoMetrics},
		[]string{"TestFastStopEndsEtcdOnlyWithNothingToLose"}},
	{"manifest", "a vanished static-pod manifest is put back (§6)", []Reason{ReasonManifestMissing, ReasonMembershipUnknown, ReasonInRestoreDelay,
		ReasonNoCheckpoint, ReasonDataDirUnusable, ReasonMemberRunning, ReasonRestoreLimit, ReasonRestoreLogUnusable},
		[]string{"TestAVanishedManifestOfAListedMemberIsRestoredAfterTheDelay", "TestAManifestRestoreIsRefusedForEachReason"}},
	{"steward", "a lost node's member freed by a steward (§11)", []Reason{ReasonNodeReady, ReasonMemberServing, ReasonStewardNotHealthy, ReasonNotGated},
		[]string{"TestStewardFreesALostNodesMemberStepByStepAndRefusesOtherwise", "TestStewardRemovalKeepsAQuorumOfTheSmallerCluster"}},
	{"move", "a move, add first or through the snapshot store (§11)", []Reason{ReasonTargetNotReady, ReasonTargetHasMember, ReasonNoSnapshotStore,
		ReasonSnapshotStoreUnreached, ReasonMemberNotHealthy, ReasonMoveFailed, ReasonMoveTimedOut, ReasonMoveWaiting, ReasonNoFreePV,
		ReasonTargetPVUnusable, ReasonTargetInsufficientResources, ReasonTargetViolatesSpread, ReasonTargetHostPortInUse,
		ReasonTargetViolatesPodAffinity, ReasonAwaitingMoveTarget},
		[]string{"TestDecideMoveRefusesEachUnsafeOrUnclearStart", "TestDecideMoveRetiresOnlyForAMemberItsOwnAskAdded", "TestMoveAwayRefusesEachUnsafeOrUnclearStart"}},
}
