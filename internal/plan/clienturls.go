package plan

import (
	"fmt"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
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
