package plan

import (
	"fmt"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// asideClientURLs: the learner starts with its client URLs set aside. An
// etcd 3.5 learner answers client writes with "rpc not supported for
// learner" as Unavailable, which etcd clients (the API server's) do not
// send to another member: every client given its URL would see writes
// fail from its start to its promotion. Set aside, it listens only on a
// port no client was given, until RestoreClientURLs (docs/recovery.md,
// "etcd versions"). 3.6 answers FailedPrecondition, which clients retry
// elsewhere; an unknown version is started as it is.
func asideClientURLs(in Input) bool {
	return in.CanSetClientURLsAside && strings.HasPrefix(in.LearnerVersion, "3.5.")
}

// decideRestoreClientURLs: the promoted member restarts on its own client
// URLs. A restart takes a voter down for a moment: while it serves, only
// when the other healthy voters keep a quorum (rule 2's count). A member
// not serving (down, or its restart under way) is started at once: that
// changes nothing for the quorum.
func decideRestoreClientURLs(o observation.Observation, ours observation.Member) Decision {
	if ours.Serving {
		n, rest := o.Voters(), 0
		for _, m := range o.Members {
			if m.ID != ours.ID && !m.IsLearner && m.Serving {
				rest++
			}
		}
		if rest < memberstate.Quorum(n) {
			return wait(ReasonWouldLoseQuorum, fmt.Sprintf("restarting %x on its own client URLs leaves %d healthy of %d voters, quorum is %d", ours.ID, rest, n, memberstate.Quorum(n)))
		}
	}
	return Decision{Action: RestoreClientURLs, MemberID: ours.ID,
		Detail: fmt.Sprintf("%x is a voter: restart it on its own client URLs (set aside while a learner)", ours.ID)}
}

// decideIdleRestore: no recovery is open and the member's client URLs are
// still set aside (the rejoin that set them aside timed out waiting for a
// quorum to restart it, or failed at its restart). A serving voter is
// restarted on its own URLs under the Lease, as a record of its own, on
// the same rule; a member that does not serve is not (its own heal's start
// puts them back). Without this, it would serve on a URL no client has for
// good, and other members' heals would meet a source on a URL that refuses.
func decideIdleRestore(in Input, cfg Config) (Decision, bool) {
	o := in.Obs
	local, inList := localMember(o)
	if !inList || local.IsLearner || !local.Serving || in.Verdict.State != memberstate.Healthy ||
		!observation.DataDirUsable(o.Local.DataDirClass) || foreignOnly(o) {
		return Decision{}, false
	}
	if l := o.Local; !o.ClusterPinned && l.DataDirClusterID != 0 && o.ClusterID != 0 && l.DataDirClusterID != o.ClusterID {
		return Decision{}, false // checkBegin's foreign-cluster refusal says why
	}
	what := fmt.Sprintf("member %x serves with its client URLs set aside by an earlier rejoin", local.ID)
	switch {
	case cfg.DryRun:
		return refuse(ReasonDryRun, what+"; would restart it on its own"), true
	case !cfg.AutoHeal:
		return Decision{Action: Nothing, Reason: ReasonAutoHealDisabled, Detail: what + "; automatic healing is off"}, true
	case quorumLost(o):
		return refuse(ReasonMajorityLost, what+"; the cluster has no quorum"), true
	case !in.APIAvailable:
		return refuse(ReasonAPIUnavailable, what+"; the Kubernetes API is unreachable: no Lease, no restart"), true
	case in.LeaseHolder != "":
		return refuse(ReasonLeaseHeldByOther, what+"; the recovery Lease is held by "+in.LeaseHolder), true
	}
	if wait := backoffLeft(in, cfg); wait > 0 {
		return Decision{Action: Nothing, Reason: ReasonBackoff, Detail: fmt.Sprintf("%s; last attempt failed (%s), next in %s", what, in.Journal.Reason, wait.Round(time.Second))}, true
	}
	d := decideRestoreClientURLs(o, local)
	if d.Action != RestoreClientURLs {
		return d, true
	}
	return Decision{Action: BeginRestoreClientURLs, MemberID: local.ID, Detail: what + "; restart it on its own"}, true
}

// decideRestoreRecord: the record of decideIdleRestore, with the Lease
// held, re-checked on a fresh observation. Nothing waits here with the
// Lease held: a restart the quorum does not allow now ends the record as
// refused (the voter it waits for needs the Lease to be healed). Once the
// manifest has the member's own URLs again, the Lease is kept until it
// serves on them (Verify): released earlier, another agent could stop its
// member on an observation that still counts this one.
func decideRestoreRecord(in Input) Decision {
	o, j := in.Obs, in.Journal
	if j.Phase.AtLeast(record.PhaseVerified) {
		return Decision{Action: Finish, Detail: "the member serves on its own client URLs again"}
	}
	local, inList := localMember(o)
	if !inList || local.IsLearner || uint64(j.NewMemberID) != local.ID {
		return Decision{Action: Finish, Reason: ReasonNotNeeded, Detail: "the member is no longer the voter this restart was for: its next start puts its client URLs back"}
	}
	if quorumLost(o) {
		return Decision{Action: Finish, Reason: ReasonMajorityLost, Detail: "no quorum: the restart on its own client URLs is not made or not verified"}
	}
	if !in.ClientURLsAside {
		return Decision{Action: Verify, MemberID: local.ID}
	}
	d := decideRestoreClientURLs(o, local)
	if d.Action != RestoreClientURLs {
		d.Action = Finish // refused before any change: the idle path asks again
	}
	return d
}
