package chaos

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// LoggedChange is a membership change as etcd logged applying it
// ("added member", "removed member", "promote member"): every member logs
// every change it applies, so the logs have the changes a poll of the
// member list can miss (two changes between two polls).
type LoggedChange struct {
	Op string // add, remove, promote
	ID uint64
	At time.Time // the earliest member to log it
}

// etcdLogFields names, per etcd log message, the op and the field with the member ID.
var etcdLogFields = map[string][2]string{
	"added member":   {"add", "added-peer-id"},
	"removed member": {"remove", "removed-remote-peer-id"},
	"promote member": {"promote", "promoted-member-id"},
}

// etcdLog is the path of a node's etcd container log.
func etcdLog(logsDir, node string) string {
	return filepath.Join(logsDir, "etcd-"+node+"_etcd.log")
}

// LoggedChanges reads the etcd logs at paths: one change per op and
// member ID, at the earliest time any member logged it (a member replaying
// its WAL after a restart logs it again, later).
func LoggedChanges(paths []string) []LoggedChange {
	first := map[[2]string]LoggedChange{}
	for _, p := range paths {
		forEachLogLine(p, func(e map[string]any) {
			msg, _ := e["msg"].(string)
			f, ok := etcdLogFields[msg]
			if !ok {
				return
			}
			idHex, _ := e[f[1]].(string)
			ts, _ := e["ts"].(string)
			id, err := strconv.ParseUint(idHex, 16, 64)
			at, terr := time.Parse(time.RFC3339Nano, ts)
			if err != nil || terr != nil {
				return
			}
			k := [2]string{f[0], idHex}
			if c, seen := first[k]; !seen || at.Before(c.At) {
				first[k] = LoggedChange{Op: f[0], ID: id, At: at}
			}
		})
	}
	out := make([]LoggedChange, 0, len(first))
	for _, c := range first {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// UnseenChanges returns the logged changes the membership watch did not
// see (no change of that member's entry in a poll interval around the log
// time), so the Lease audit never checked them. Changes before the watch's
// first list (the lab's bootstrap) or after its last are not its to see.
func UnseenChanges(logged []LoggedChange, h []invariant.Membership) []string {
	if len(h) == 0 {
		return nil
	}
	type seen struct{ since, at time.Time }
	changed := map[uint64][]seen{}
	for i := 1; i < len(h); i++ {
		prev := map[uint64]invariant.Member{}
		for _, m := range h[i-1].Members {
			prev[m.ID] = m
		}
		for _, m := range h[i].Members {
			if p, ok := prev[m.ID]; !ok || p.Learner != m.Learner {
				changed[m.ID] = append(changed[m.ID], seen{h[i].Since, h[i].At})
			}
			delete(prev, m.ID)
		}
		for id := range prev {
			changed[id] = append(changed[id], seen{h[i].Since, h[i].At})
		}
	}
	// The two clocks are one machine's; the slack covers a log line
	// written a little after the apply and a poll that read a little before.
	const slack = time.Second
	var out []string
	for _, c := range logged {
		if !c.At.After(h[0].At) || c.At.After(h[len(h)-1].At) {
			continue
		}
		ok := false
		for _, s := range changed[c.ID] {
			if !c.At.Before(s.since.Add(-slack)) && !c.At.After(s.at.Add(slack)) {
				ok = true
				break
			}
		}
		if !ok {
			out = append(out, fmt.Sprintf("etcd logged %s of member %x at %s, but the membership watch saw no change of that member then: a change the Lease audit did not check",
				c.Op, c.ID, c.At.Format("15:04:05.000")))
		}
	}
	return out
}
