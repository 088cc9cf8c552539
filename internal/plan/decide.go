package plan

import (
	"fmt"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Decide returns the next safe step for the local member, or why there is none.
func Decide(in Input, cfg Config) Decision {
	if in.Journal.Active() {
		d := decideActive(in, cfg)
		if cfg.DryRun || (in.Request != nil && in.Request.DryRun) {
			// A dry run changes nothing in any phase, and takes no Lease to
			// resume (its holder acts): it reports what it would do.
			return refuse(ReasonDryRun, fmt.Sprintf("recovery %s open in phase %s; would: %s", in.Journal.ID, in.Journal.Phase, describeStep(d)))
		}
		return d
	}
	return decideIdle(in, cfg)
}

// decideIdle: no recovery is open. Is one wanted, and is it safe to begin?
func decideIdle(in Input, cfg Config) Decision {
	o, v := in.Obs, in.Verdict
	if in.Request != nil {
		switch in.Request.Action {
		case "", "rejoin":
		case ActionMoveIn:
			if d, ok := checkMoveIn(in, cfg); !ok {
				return d
			}
		case ActionMoveOut:
			if d, ok := checkMoveOut(in, false); !ok {
				return d
			}
		case ActionMoveAway:
			if d, ok := checkMoveAway(in, cfg); !ok {
				return d
			}
		default:
			// Rule 10: an unknown manual request never triggers a rejoin
			// (which may stop a healthy member).
			return refuse(ReasonBadRequest, fmt.Sprintf("unknown request %q (the only one is \"rejoin\")", in.Request.Action))
		}
	}
	if in.Request == nil && in.ClientURLsAside {
		if d, ok := decideIdleRestore(in, cfg); ok {
			return d
		}
	}
	if j := in.Journal; in.Request == nil && movedAway(j) {
		return Decision{Action: Nothing, Reason: ReasonMovedAway, Detail: fmt.Sprintf("member %x moved to %s (recovery %s); it is not healed here unasked (etcd-agent recover adds it back as a new member)",
			uint64(j.OldMemberID), j.MoveTarget, j.ID)}
	}
	if in.Request == nil && in.NeverAMember {
		// A member never seen in this cluster (a manifest placed on a new
		// node): adding it grows the cluster, which is a person's call (a
		// move asks for it), never an automatic heal's.
		return Decision{Action: Nothing, Reason: ReasonNotAMember, Detail: "the local member was never seen in this cluster (not in the list, nothing pinned, no node's record names it): it is added only on request (etcd-agent move, or etcd-agent recover)"}
	}
	if d, wait := waitForFirstStart(in); wait {
		return d
	}
	if in.Request == nil {
		switch {
		case v.State != memberstate.Lost && (v.State == memberstate.Degraded || v.State == memberstate.Down):
			return Decision{Action: Nothing, Reason: ReasonInGracePeriod, Detail: v.Detail}
		case v.State != memberstate.Lost:
			return Decision{Action: Nothing, Detail: "member " + string(v.State)}
		case !cfg.AutoHeal:
			return Decision{Action: Nothing, Reason: ReasonAutoHealDisabled, Detail: "member lost; automatic healing is off (use the recover annotation)"}
		}
		if wait := backoffLeft(in, cfg); wait > 0 {
			return Decision{Action: Nothing, Reason: ReasonBackoff,
				Detail: fmt.Sprintf("last attempt failed (%s); next in %s", in.Journal.Reason, wait.Round(time.Second))}
		}
	}
	if d, ok := checkBegin(in, cfg); !ok {
		if d.Reason == ReasonLearnerPresent {
			return rollbackStranded(in, cfg, d, false) // rolled back if stranded
		}
		return d
	}
	if in.ManifestMissing {
		// After the rules that say the cluster itself is in trouble: those
		// are what a person must hear first.
		return refuse(ReasonManifestMissing, "the etcd static-pod manifest is gone and the agent did not park it: nothing can stop or start the member; "+
			"whether and when its checkpoint goes back is the manifest keeper's answer (status: manifest; docs/recovery.md, \"A single control-plane node\")")
	}
	if !in.APIAvailable {
		return refuse(ReasonAPIUnavailable, "the Kubernetes API is unreachable: no Lease, no action")
	}
	if in.LeaseHolder != "" {
		return refuse(ReasonLeaseHeldByOther, "the recovery Lease is held by "+in.LeaseHolder+"; one change at a time")
	}
	text := planText(o)
	if in.Request != nil && in.Request.Action == ActionMoveAway {
		text = movePlanText(o, in.Claim, in.Request.Target)
	}
	if cfg.DryRun || (in.Request != nil && in.Request.DryRun) {
		return refuse(ReasonDryRun, "would: "+text)
	}
	return Decision{Action: Begin, Detail: text}
}

// checkBegin applies the rules that must hold to begin (and, after the
// Lease is acquired, to go on): rules 1, 2, 3, 6 and 7 of the design.
func checkBegin(in Input, cfg Config) (Decision, bool) {
	o := in.Obs
	n := o.Voters()
	if foreignOnly(o) {
		return refuse(ReasonForeignCluster, fmt.Sprintf("no member of cluster %x answers; %v answer for another cluster (ignored)",
			o.PinnedClusterID, o.ForeignEndpoints)), false
	}
	if l := o.Local; !o.ClusterPinned && l.DataDirClusterID != 0 && o.ClusterID != 0 && l.DataDirClusterID != o.ClusterID {
		// Nothing pinned yet (a first install, a lost state dir): the data
		// dir names another cluster than the endpoints that answered (a
		// recycled IP, a typo in --endpoints). Which one is this member's
		// is a person's call; healing would quarantine the data and join
		// the other cluster.
		return refuse(ReasonForeignCluster, fmt.Sprintf("the data dir belongs to cluster %x, the endpoints answer for cluster %x, and nothing is pinned: check --endpoints",
			l.DataDirClusterID, o.ClusterID)), false
	}
	if quorumLost(o) {
		return refuse(ReasonMajorityLost, fmt.Sprintf("%d of %d voters serve, quorum is %d (or no leader): restoring from a backup is a human's call%s",
			o.ServingVoters(), n, memberstate.Quorum(n), backups(in))), false
	}
	if o.Local.Match == observation.MatchAmbiguous {
		return refuse(ReasonAmbiguousIdentity, o.Local.MatchDetail), false
	}
	local, inList := localMember(o)
	if inList && local.IsLearner {
		// A learner with our identity that no journal of ours explains.
		return refuse(ReasonAmbiguousIdentity, fmt.Sprintf("learner %x with our peer URL is of unknown origin", local.ID)), false
	}
	healthy := o.HealthyVoters()
	localHealthy := inList && local.Serving && observation.DataDirUsable(o.Local.DataDirClass)
	if localHealthy {
		if in.Request == nil {
			return refuse(ReasonMemberHealthy, "the member is healthy; never removed automatically"), false
		}
		if healthy-1 < memberstate.Quorum(n) {
			return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("stopping this healthy member leaves %d healthy of %d voters, quorum is %d",
				healthy-1, n, memberstate.Quorum(n))), false
		}
	}
	if inList && local.Serving && o.ServingVoters()-1 < memberstate.Quorum(n) {
		return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("stopping this serving member leaves %d serving of %d voters, quorum is %d",
			o.ServingVoters()-1, n, memberstate.Quorum(n))), false
	}
	if inList {
		remaining := healthy
		if localHealthy {
			remaining--
		}
		if remaining < memberstate.Quorum(n-1) {
			return refuse(ReasonWouldLoseQuorum, fmt.Sprintf("after removing this member %d healthy of %d voters remain, quorum is %d",
				remaining, n-1, memberstate.Quorum(n-1))), false
		}
	}
	if ls := o.Learners(); len(ls) > 0 {
		return refuse(ReasonLearnerPresent, fmt.Sprintf("learner %x (%s) is present; one learner at a time", ls[0].ID, ls[0].Name)), false
	}
	if d, ok := checkVersions(in); !ok {
		return d, false
	}
	if disp, reason, why := DataDirDisposal(DataDirAt{VolumeRoot: in.DataDirVolumeRoot, Symlink: in.DataDirSymlink}, o.Local.DataDirClass); disp == DisposeRefuse {
		return refuse(reason, why), false
	}
	if disp, reason, why := WALDirDisposal(in.WALDirDedicated, in.WALDirMountPoint, in.WALDirSymlink); disp == DisposeRefuse {
		return refuse(reason, why), false
	}
	return checkSpace(in, cfg)
}

// resumedRequest is the request an open journal stands for: a move's, as
// it recorded it; a manual one's action; for an automatic recovery, the
// request asked now (nil: none).
func resumedRequest(j record.Record, now *Request) *Request {
	switch j.Request {
	case "", "auto":
		if now != nil && now.Action != "" && now.Action != "rejoin" {
			return nil // a move asked now is not this recovery's request
		}
		return now
	case ActionMoveOut:
		return &Request{Action: ActionMoveOut, Target: j.MoveTarget, Replacement: uint64(j.MoveMemberID)}
	case ActionMoveIn:
		return &Request{Action: ActionMoveIn, Replaces: uint64(j.MoveMemberID), MoveFrom: j.MoveFrom}
	case ActionMoveAway:
		return &Request{Action: ActionMoveAway, Target: j.MoveTarget}
	}
	return &Request{Action: j.Request}
}

// decideActive: a recovery is open. Steps that change membership are judged
// from the cluster's actual member list, not from the journal's memory, so a
// resumed (or taken-over) recovery never repeats an add or a remove.
func decideActive(in Input, cfg Config) Decision {
	o, j := in.Obs, in.Journal
	if awaitingMoveTarget(in) {
		// Before the Lease, which the target's agent needs to add the
		// member: a released pod move only waits (podmove_wait.go).
		return awaitMoveTarget(in, cfg)
	}
	if !in.LeaseHeld {
		switch {
		case !in.APIAvailable:
			return wait(ReasonAPIUnavailable, "recovery open in phase "+string(j.Phase)+"; the Kubernetes API is unreachable")
		case in.LeaseHolder != "":
			return wait(ReasonLeaseHeldByOther, "recovery open; the Lease is held by "+in.LeaseHolder)
		}
		return Decision{Action: Begin, Detail: "resume from phase " + string(j.Phase)}
	}
	if j.Kind == record.KindRollbackLearner {
		return decideRollback(in, cfg)
	}
	if j.Kind == record.KindRestoreClientURLs {
		return decideRestoreRecord(in)
	}
	// The journal is the request (also after a restart): a manual
	// recovery stays manual, a move keeps its own.
	in.Request = resumedRequest(j, in.Request)
	if !j.Phase.AtLeast(record.PhaseStopped) {
		// Rule 6: the condition is re-verified once the Lease is held, on a
		// fresh observation and the tracker's verdict on it; not after a
		// stop was tried (the member may be down by our hand).
		if in.Request == nil && j.StopAttemptedAt.IsZero() {
			if d, done := recheckLost(in); done {
				return d
			}
		}
		// A move is checked again on the fresh observation now that the
		// Lease is held.
		switch j.Request {
		case ActionMoveOut:
			if d, ok := checkMoveOut(in, !j.StopAttemptedAt.IsZero()); !ok {
				d.Action = Finish
				return d
			}
		case ActionMoveIn:
			if j.StopAttemptedAt.IsZero() {
				if d, ok := checkMoveIn(in, cfg); !ok {
					d.Action = Finish
					return d
				}
			}
		case ActionMoveAway:
			if j.StopAttemptedAt.IsZero() {
				if d, ok := checkMoveAway(in, cfg); !ok {
					d.Action = Finish
					return d
				}
				if d, ok := decideMoveAwayStart(in); ok {
					return d
				}
			}
		}
		if j.Request == ActionMoveOut && !j.StopAttemptedAt.IsZero() {
			return Decision{Action: StopMember} // finish our own stop; checkMoveOut counted it
		}
		if d, ok := checkBegin(in, cfg); !ok {
			d.Action = Finish
			return d
		}
		return stopWithBackup(in)
	}
	switch j.Request {
	case ActionMoveOut:
		return decideMoveOut(in)
	case ActionMoveAway:
		return decideMoveAway(in, cfg)
	}
	if foreignOnly(o) {
		return wait(ReasonForeignCluster, fmt.Sprintf("only %v answer, for another cluster than %x; waiting, nothing destructive",
			o.ForeignEndpoints, o.PinnedClusterID))
	}
	if quorumLost(o) {
		return wait(ReasonMajorityLost, "quorum lost during the recovery; waiting, nothing destructive")
	}
	if !j.Phase.AtLeast(record.PhaseSnapshotted) {
		if src, ok := backupSourceServing(o, in.BackupStreamingFrom, uint64(j.OldMemberID)); ok {
			return Decision{Action: TakeSnapshot, SourceID: src.ID,
				Detail: fmt.Sprintf("take the pre-change backup streamed during the stop from %s (%x)", src.Name, src.ID)}
		}
		src, why, err := PickSource(o, uint64(j.OldMemberID))
		if err != nil {
			return wait(ReasonNoSnapshotSource, err.Error())
		}
		return Decision{Action: TakeSnapshot, SourceID: src.ID, Detail: "stream the pre-change backup from " + why}
	}
	if old, ok := o.Member(uint64(j.OldMemberID)); ok && j.OldMemberID != 0 && j.OldMemberID != j.NewMemberID {
		return decideRemove(o, old)
	}
	ours, found := memberWithPeerURLs(o, j.PeerURLs, uint64(j.OldMemberID))
	if !found {
		if j.Phase.AtLeast(record.PhaseLearnerAdded) {
			return Decision{Action: Finish, Reason: ReasonLearnerGone, Detail: fmt.Sprintf("learner %x is no longer a member", uint64(j.NewMemberID))}
		}
		if j.Request == ActionMoveIn {
			// The add grows the cluster: only while the source still asks.
			switch {
			case in.MoveSourceUnread != "":
				return wait(ReasonAPIUnavailable, "the add waits until the move's source can be read: "+in.MoveSourceUnread)
			case in.MoveSourceGone != "":
				return Decision{Action: Finish, Reason: ReasonBadRequest, Detail: in.MoveSourceGone + ": no member is added"}
			}
		}
		d := decideAdd(in, cfg)
		d.AsideClientURLs = d.Action == AddLearner && asideClientURLs(in)
		if d.Action == AddLearner {
			d.Seed = ChooseSeed(j, cfg) // the add's step prepares the data dir right away
		}
		return d
	}
	if uint64(j.NewMemberID) != ours.ID {
		if !ours.IsLearner {
			return Decision{Action: Finish, Reason: ReasonAmbiguousIdentity,
				Detail: fmt.Sprintf("voter %x has our peer URL but is not the learner this recovery added", ours.ID)}
		}
		// Rule 7: adopt only the learner of an add whose answer we lost (no
		// ID recorded), unstarted or started under our name; any other
		// learner with our peer URL is of unknown origin.
		if j.NewMemberID != 0 || (ours.Name != "" && ours.Name != o.Local.Name) {
			return Decision{Action: Finish, Reason: ReasonAmbiguousIdentity,
				Detail: fmt.Sprintf("learner %x (%q) has our peer URL but is not the learner this recovery added (%x)", ours.ID, ours.Name, uint64(j.NewMemberID))}
		}
		return Decision{Action: AdoptLearner, MemberID: ours.ID, Detail: "a learner with our peer URL exists (an add that was applied): reuse it"}
	}
	if !j.Phase.AtLeast(record.PhasePrepared) {
		return Decision{Action: PrepareDataDir, MemberID: ours.ID, Seed: ChooseSeed(j, cfg)}
	}
	if !j.Phase.AtLeast(record.PhaseMemberStarted) {
		return Decision{Action: StartMember, MemberID: ours.ID, AsideClientURLs: asideClientURLs(in)}
	}
	if ours.IsLearner {
		return decidePromote(in, cfg, ours)
	}
	if in.ClientURLsAside {
		d := decideRestoreClientURLs(in.Obs, ours)
		if d.Action != RestoreClientURLs {
			// Never held waiting: the voter it waits for needs the Lease to
			// be healed. The member serves; its restart on its own URLs is
			// made later under a record of its own (decideIdleRestore).
			d.Action = Finish
		}
		return d
	}
	if !j.Phase.AtLeast(record.PhaseVerified) {
		return Decision{Action: Verify, MemberID: ours.ID}
	}
	detail := "member rejoined, promoted and verified"
	if j.Message != "" {
		detail += ": " + j.Message // verify's judgement, dead voters named
	}
	return Decision{Action: Finish, Detail: detail}
}

// recheckLost is rule 6's re-check of an automatic recovery after the
// Lease is acquired, before the stop: a member that serves with usable
// data, or whose data dir is usable and that is no longer lost (back within
// its grace: restarting, or its data dir came back), is not stopped; the
// recovery closes as not-needed. A member not lost any more whose data dir
// is still unusable (an unconfirmed corrupt class, a gap in observation
// restarted the run) closes as in-grace-period: the tracker decides again.
func recheckLost(in Input) (Decision, bool) {
	o, v := in.Obs, in.Verdict
	local, inList := localMember(o)
	usable := observation.DataDirUsable(o.Local.DataDirClass)
	switch {
	case inList && local.Serving && usable:
		return Decision{Action: Finish, Reason: ReasonNotNeeded,
			Detail: fmt.Sprintf("re-checked after the Lease: the member serves with a usable data dir (%s, %s); nothing to do", v.State, v.Reason)}, true
	case v.State == memberstate.Lost:
		return Decision{}, false
	case usable:
		return Decision{Action: Finish, Reason: ReasonNotNeeded,
			Detail: fmt.Sprintf("re-checked after the Lease: the data dir is usable and the member is %s, not lost (%s); nothing to do", v.State, v.Detail)}, true
	}
	return Decision{Action: Finish, Reason: ReasonInGracePeriod,
		Detail: fmt.Sprintf("re-checked after the Lease: the member is %s, not lost (%s); the tracker decides again", v.State, v.Detail)}, true
}

// decideRemove: rule 2. The old member must not be healthy, and the voters
// left must keep a quorum of the smaller cluster.
func decideRemove(o observation.Observation, old observation.Member) Decision {
	n := o.Voters()
	if old.Serving {
		return wait(ReasonMemberHealthy, fmt.Sprintf("old member %x still serves; it must be stopped before it is removed", old.ID))
	}
	remaining := o.HealthyVoters()
	if !old.IsLearner && remaining < memberstate.Quorum(n-1) {
		return wait(ReasonWouldLoseQuorum, fmt.Sprintf("removing %x leaves %d healthy of %d voters, quorum is %d", old.ID, remaining, n-1, memberstate.Quorum(n-1)))
	}
	return Decision{Action: RemoveMember, MemberID: old.ID, Detail: fmt.Sprintf("remove old member %x (%s)", old.ID, old.Name)}
}

// decideAdd: rule 3. Only as a learner, only when no other learner exists
// and the healthy voters are a quorum. A stranded learner (its owner took
// the Lease while ours had expired, and died) is removed first: we hold the
// Lease now.
func decideAdd(in Input, cfg Config) Decision {
	o := in.Obs
	if ls := o.Learners(); len(ls) > 0 {
		if d := rollbackStranded(in, cfg, Decision{}, true); d.Action == RollbackLearner {
			d.Action = RemoveStrandedLearner
			return d
		}
		return wait(ReasonLearnerPresent, fmt.Sprintf("learner %x (%s) is present; one learner at a time", ls[0].ID, ls[0].Name))
	}
	n := o.Voters()
	if h := o.HealthyVoters(); h < memberstate.Quorum(n) {
		return wait(ReasonWouldLoseQuorum, fmt.Sprintf("%d healthy of %d voters, quorum is %d: no add", h, n, memberstate.Quorum(n)))
	}
	return Decision{Action: AddLearner}
}

// decidePromote: rule 4. Promote once the learner's applied index is within
// MaxLearnerLag of the leader's index; remove a learner that stalls.
func decidePromote(in Input, cfg Config, learner observation.Member) Decision {
	j := in.Journal
	leader, ok := in.Obs.Member(in.Obs.LeaderID)
	if learner.Serving && ok {
		lag := lagOf(leader, learner)
		if lag <= cfg.MaxLearnerLag {
			return Decision{Action: Promote, MemberID: learner.ID, Detail: fmt.Sprintf("learner is %d entries behind (max %d)", lag, cfg.MaxLearnerLag)}
		}
	}
	if !j.LearnerProgressAt.IsZero() && in.Now.Sub(j.LearnerProgressAt) > cfg.LearnerStallTimeout {
		return Decision{Action: RemoveStalledLearner, MemberID: learner.ID, Reason: ReasonLearnerStalled,
			Detail: fmt.Sprintf("no progress since %s (applied %d)", j.LearnerProgressAt.Format(time.RFC3339), j.LearnerApplied)}
	}
	detail := "learner not serving yet"
	if learner.Serving && ok {
		detail = fmt.Sprintf("learner is %d entries behind (max %d)", lagOf(leader, learner), cfg.MaxLearnerLag)
	}
	return Decision{Action: WaitCatchUp, MemberID: learner.ID, Detail: detail}
}

// LearnerLag is how many entries the learner's applied index is behind the
// leader's raft index (0 when ahead).
func LearnerLag(o observation.Observation, learnerID uint64) (uint64, bool) {
	leader, ok1 := o.Member(o.LeaderID)
	learner, ok2 := o.Member(learnerID)
	if !ok1 || !ok2 || !learner.Serving {
		return 0, false
	}
	return lagOf(leader, learner), true
}

func lagOf(leader, learner observation.Member) uint64 {
	if learner.AppliedIndex >= leader.RaftIndex {
		return 0
	}
	return leader.RaftIndex - learner.AppliedIndex
}

func quorumLost(o observation.Observation) bool {
	return o.MemberListError != "" || o.LeaderID == 0 || o.ServingVoters() < memberstate.Quorum(o.Voters())
}

// foreignOnly: endpoints of another cluster answered and nothing of ours
// did (no member list, no member serving). Acting on the other cluster's
// view would quarantine good data and join it (rule 7, one cluster).
func foreignOnly(o observation.Observation) bool {
	return len(o.ForeignEndpoints) > 0 && o.MemberListError != "" &&
		!slices.ContainsFunc(o.Members, func(m observation.Member) bool { return m.Serving })
}

func localMember(o observation.Observation) (observation.Member, bool) {
	if o.Local.Match != observation.MatchOK {
		return observation.Member{}, false
	}
	return o.Member(o.Local.ID)
}

// memberWithPeerURLs finds the member (other than exclude) that has one of
// peerURLs: the learner this recovery added, named or not yet.
func memberWithPeerURLs(o observation.Observation, peerURLs []string, exclude uint64) (observation.Member, bool) {
	for _, m := range o.Members {
		if m.ID == exclude {
			continue
		}
		for _, u := range m.PeerURLs {
			if slices.Contains(peerURLs, u) {
				return m, true
			}
		}
	}
	return observation.Member{}, false
}

func backoffLeft(in Input, cfg Config) time.Duration {
	j := in.Journal
	if j.Failures == 0 || j.LastFailureAt.IsZero() {
		return 0
	}
	b := cfg.RetryBackoff
	for i := 1; i < j.Failures && b < cfg.MaxRetryBackoff; i++ {
		b *= 2
	}
	if cfg.MaxRetryBackoff > 0 {
		b = min(b, cfg.MaxRetryBackoff)
	}
	return max(0, j.LastFailureAt.Add(b).Sub(in.Now))
}

func planText(o observation.Observation) string {
	local, inList := localMember(o)
	remove := "member not in the list: no remove"
	if inList {
		remove = fmt.Sprintf("remove member %x", local.ID)
	}
	return fmt.Sprintf("stop member %s, quarantine %s, stream a snapshot from a follower, %s, add %v as a learner, start it, promote when caught up, verify HashKV",
		o.Local.Name, o.Local.DataDir, remove, o.Local.PeerURLs)
}

// describeStep names a decision for a dry run's report.
func describeStep(d Decision) string {
	s := string(d.Action)
	if d.MemberID != 0 {
		s += fmt.Sprintf(" %x", d.MemberID)
	}
	if d.Reason != ReasonNone {
		s += " (" + string(d.Reason) + ")"
	}
	if d.Detail != "" {
		s += ": " + d.Detail
	}
	return s
}

func backups(in Input) string {
	if in.Backups == "" {
		return ""
	}
	return "; " + in.Backups
}

func refuse(r Reason, detail string) Decision {
	return Decision{Action: Refuse, Reason: r, Detail: detail}
}
func wait(r Reason, detail string) Decision {
	return Decision{Action: Nothing, Reason: r, Detail: detail}
}

// neverStartedPatience is how long a member that has never started, with
// member data in its data dir, is left to finish its first start (its db
// is written before its WAL: a look in between reads corrupt) before it is
// healed as any lost member.
const neverStartedPatience = 2 * time.Minute

// waitForFirstStart: the local member is in the list but has never started
// (no client URLs published, as etcd does at its first start), so it has
// lost nothing. A bootstrap held at its gate, or a member added and not yet
// started, is waited for, never replaced unasked: with a missing or empty
// data dir for as long as it takes; with member data (a first start under
// way, or one that failed) for neverStartedPatience of trouble.
func waitForFirstStart(in Input) (Decision, bool) {
	o := in.Obs
	local, inList := localMember(o)
	if in.Request != nil || !inList || local.IsLearner || !neverStarted(local) {
		return Decision{}, false
	}
	class := o.Local.DataDirClass
	if class == observation.DataDirMissing || class == observation.DataDirEmpty {
		return Decision{Action: Nothing, Reason: ReasonNeverStarted, Detail: fmt.Sprintf("member %x has never started (no client URLs published) and its data dir is %s: nothing to heal; it joins when it starts (etcd-agent recover replaces it on request)",
			local.ID, class)}, true
	}
	if since := in.Verdict.TroubleSince; !since.IsZero() && in.Now.Sub(since) < neverStartedPatience {
		return Decision{Action: Nothing, Reason: ReasonNeverStarted, Detail: fmt.Sprintf("member %x has never started (no client URLs published) and its data dir is %s: its first start may be under way; healed if it has not started %s after its trouble began (%s)",
			local.ID, class, neverStartedPatience, since.UTC().Format(time.RFC3339))}, true
	}
	return Decision{}, false
}
