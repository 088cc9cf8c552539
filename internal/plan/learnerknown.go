package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// ListedMember is one member of a member list as one voter has applied it
// (a serializable MemberList of that voter).
type ListedMember struct {
	ID       uint64
	PeerURLs []string
}

// LearnerKnownEverywhere says whether the learner newID may be started:
// every voter asked (lists, by name) has applied its add at peerURLs and
// lists no other member at those URLs; failed names the voters that did not
// answer. Why: etcd started on a data dir without a WAL (raft mode) takes
// its member ID from the first peer that answers its member-list request,
// matched by peer URL, so a voter still behind on the remove hands it the
// removed member's old ID: it then serves under that ID or panics on the
// leader's commit index ("tocommit(N) is out of range [lastIndex(0)]").
// Seen in the lab's 2.3 GiB bench: the leader applied a remove 11 s after the
// follower that acknowledged it, and a member started in that window took
// its old ID (the upstream procedure, no agent; its start gate then held the
// crash-looping etcd as stale).
func LearnerKnownEverywhere(lists map[string][]ListedMember, failed map[string]string, newID uint64, peerURLs []string) (bool, string) {
	var behind []string
	for name, why := range failed {
		behind = append(behind, fmt.Sprintf("%s did not answer (%s)", name, why))
	}
	for name, list := range lists {
		known := false
		for _, m := range list {
			switch {
			case m.ID == newID:
				known = true
			case observation.Overlaps(m.PeerURLs, peerURLs):
				behind = append(behind, fmt.Sprintf("%s still lists member %x at %s", name, m.ID, strings.Join(m.PeerURLs, ",")))
			}
		}
		if !known {
			behind = append(behind, fmt.Sprintf("%s does not list learner %x yet", name, newID))
		}
	}
	if len(lists)+len(failed) == 0 {
		return false, "no voter to ask"
	}
	if len(behind) > 0 {
		sort.Strings(behind)
		return false, strings.Join(behind, "; ")
	}
	return true, fmt.Sprintf("%d voter(s) list learner %x at %s", len(lists), newID, strings.Join(peerURLs, ","))
}
