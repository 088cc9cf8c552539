package plan

import (
	"fmt"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// A stranded learner (issue 10 item 5, docs/design.md §5 "the new holder resumes or
// rolls back"): the agent that added it died (its node was lost) before it
// promoted or removed it. Its learner then blocks every other heal with
// learner-present (rule 3: one learner at a time), for good. The next Lease
// holder rolls it back: it removes the learner, and its own heal proceeds.
//
// A learner is stranded when all of these hold:
//   - it is not ours: its peer URL is not the local member's (our own
//     learner is our journal's, or of unknown origin: rule 7);
//   - the watchdog has seen it make no progress (its applied index did not
//     grow) for longer than the learner stall timeout, and it is not a
//     serving learner caught up within MaxLearnerLag (its owner could still
//     promote it); a slow but progressing catch-up is never stranded;
//   - no other agent holds a live Lease: its owner, mid-heal, may be the
//     holder. The Lease has been expired or free at every look of this
//     agent for longer than the stall timeout (the owner stopped renewing
//     for good, not for a moment: a seed stream of a live owner may keep
//     its learner unstarted for minutes).
//
// Only an agent that wants to begin a heal (its refusal would be
// learner-present) rolls back; the rollback is a recovery record of its
// own (record.KindRollbackLearner) under the Lease, fenced like every
// membership change and re-checked on a fresh observation before the
// remove. A rollback record resumed by a restarted agent (whose clock
// starts afresh) finds the learner not stranded yet and closes without a
// change: a rollback is delayed by a restart, never hastened.

// stranded reports whether learner m is stranded (Lease aside) and for
// how long it has made no progress.
func stranded(in Input, cfg Config, m observation.Member) (time.Duration, bool) {
	o := in.Obs
	if !m.IsLearner || cfg.LearnerStallTimeout <= 0 || slices.ContainsFunc(m.PeerURLs, func(u string) bool { return slices.Contains(o.Local.PeerURLs, u) }) {
		return 0, false
	}
	i := slices.IndexFunc(in.Learners, func(p memberstate.LearnerProgress) bool { return p.ID == m.ID })
	if i < 0 {
		return 0, false // no clock yet
	}
	idle := in.Now.Sub(in.Learners[i].Since)
	if idle <= cfg.LearnerStallTimeout {
		return idle, false
	}
	if leader, ok := o.Member(o.LeaderID); ok && m.Serving && lagOf(leader, m) <= cfg.MaxLearnerLag {
		return idle, false // caught up: promotable, not stranded
	}
	return idle, true
}

// rollbackStranded is decideIdle's answer to a learner-present refusal
// (refusal): roll back a stranded learner, if one is and no one else holds
// the Lease; else the refusal stands.
// atOurAdd: our own open rejoin, holding the Lease, meets the learner at
// its add (the owner lost the Lease to us: its fences fail).
func rollbackStranded(in Input, cfg Config, refusal Decision, atOurAdd bool) Decision {
	for _, m := range in.Obs.Learners() {
		idle, ok := stranded(in, cfg, m)
		if !ok {
			continue
		}
		what := fmt.Sprintf("learner %x (%q, %v) made no progress for %s (stall timeout %s)", m.ID, m.Name, m.PeerURLs,
			idle.Round(time.Second), cfg.LearnerStallTimeout)
		switch {
		case !in.APIAvailable:
			return refuse(ReasonAPIUnavailable, what+"; the Kubernetes API is unreachable: no Lease, no rollback")
		case in.LeaseHolder != "":
			// Its owner may be the holder, mid-heal: never touched.
			return refuse(ReasonLearnerPresent, what+"; the recovery Lease is held by "+in.LeaseHolder+", who may be healing it")
		case !atOurAdd && (in.LeaseFreeSince.IsZero() || in.Now.Sub(in.LeaseFreeSince) <= cfg.LearnerStallTimeout):
			// Its owner's Lease may have lapsed only for a moment: it
			// must have been free at every look for a stall timeout.
			// (Holding it ourselves, at our add, the owner has lost it
			// to us: its fences fail, it changes nothing more.)
			free := "not yet seen free"
			if !in.LeaseFreeSince.IsZero() {
				free = "free for " + in.Now.Sub(in.LeaseFreeSince).Round(time.Second).String()
			}
			return refuse(ReasonLearnerPresent, what+"; the recovery Lease is "+free+", not yet for the stall timeout: its owner may still be alive")
		case cfg.DryRun || in.Request != nil && in.Request.DryRun:
			return refuse(ReasonDryRun, what+"; would: roll it back (remove it), then heal")
		}
		return Decision{Action: RollbackLearner, MemberID: m.ID, Reason: ReasonLearnerStranded,
			Detail: what + " and no agent holds the Lease: roll it back"}
	}
	return refusal
}

// decideRollback: a rollback record is open and we hold the Lease. The
// learner is re-checked on this fresh observation before it is removed.
func decideRollback(in Input, cfg Config) Decision {
	o, j := in.Obs, in.Journal
	id := uint64(j.LearnerID)
	removing := j.Phase.AtLeast(record.PhaseStopped) // a remove was journaled
	if foreignOnly(o) || quorumLost(o) {
		if !removing {
			return Decision{Action: Finish, Reason: ReasonMajorityLost,
				Detail: fmt.Sprintf("quorum lost (or only another cluster answers) before stranded learner %x was removed; nothing changed", id)}
		}
		return wait(ReasonMajorityLost, "quorum lost during the rollback of a stranded learner; waiting, nothing destructive")
	}
	m, listed := o.Member(id)
	switch {
	case !listed:
		return Decision{Action: Finish, Reason: ReasonLearnerRolledBack, Detail: fmt.Sprintf("stranded learner %x is no longer a member: rolled back", id)}
	case !m.IsLearner:
		return Decision{Action: Finish, Reason: ReasonAmbiguousIdentity, Detail: fmt.Sprintf("member %x was promoted meanwhile; not rolled back", id)}
	}
	if _, ok := stranded(in, cfg, m); !ok && !removing {
		return Decision{Action: Finish, Reason: ReasonNotNeeded,
			Detail: fmt.Sprintf("learner %x is not stranded on a fresh look (it progresses, or this agent's clock started afresh); nothing changed", id)}
	}
	return Decision{Action: RemoveStrandedLearner, MemberID: id, Reason: ReasonLearnerStranded,
		Detail: fmt.Sprintf("remove stranded learner %x (%q, %v)", id, m.Name, m.PeerURLs)}
}
