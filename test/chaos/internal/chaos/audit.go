package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// LeaseSample is one read of the recovery Lease.
type LeaseSample struct {
	At       time.Time
	Holder   string
	Acquired time.Time
	Renewed  time.Time
	Duration time.Duration
}

// Tenure is one holder's hold of the Lease as the samples show it: from
// its acquire time to its last renewal plus the lease duration.
type Tenure struct {
	Holder   string
	From, To time.Time
}

// Tenures folds the samples, in time order, into tenures: a tenure ends at
// its last renewal plus the lease duration, or earlier at the first look
// that shows the Lease released or held by someone else. The same holder
// taking its own expired Lease again keeps its acquire time (client-go
// does), so a renewal after the tenure's end starts a new one, from that
// renewal.
func Tenures(samples []LeaseSample) []Tenure {
	var out []Tenure
	cur := -1
	var curAcquired time.Time
	for _, s := range samples {
		if cur >= 0 {
			t := &out[cur]
			if s.Holder != t.Holder || !s.Acquired.Equal(curAcquired) || s.Renewed.After(t.To) {
				if s.At.Before(t.To) {
					t.To = s.At // released or taken over by this look
				}
				cur = -1
			}
		}
		if s.Holder == "" {
			continue
		}
		end := s.Renewed.Add(s.Duration)
		if cur >= 0 {
			out[cur].To = maxTime(out[cur].To, end)
			continue
		}
		from := s.Acquired
		if n := len(out); n > 0 && out[n-1].Holder == s.Holder && s.Acquired.Equal(curAcquired) {
			from = s.Renewed // its own expired Lease taken again
		}
		out = append(out, Tenure{Holder: s.Holder, From: from, To: end})
		cur, curAcquired = len(out)-1, s.Acquired
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Change is one membership change between two member lists the watch saw.
type Change struct {
	Since, At time.Time
	What      []string // "add 2f3a (node2, learner)", "remove 8e1c (node2)", "promote 2f3a (node2)"
}

// Changes lists the membership changes in a history of member lists.
func Changes(h []invariant.Membership) []Change {
	var out []Change
	for i := 1; i < len(h); i++ {
		prev := map[uint64]invariant.Member{}
		for _, m := range h[i-1].Members {
			prev[m.ID] = m
		}
		var what []string
		for _, m := range h[i].Members {
			p, ok := prev[m.ID]
			switch {
			case !ok:
				role := "voter"
				if m.Learner {
					role = "learner"
				}
				what = append(what, fmt.Sprintf("add %x (%s, %s)", m.ID, m.Name, role))
			case p.Learner && !m.Learner:
				what = append(what, fmt.Sprintf("promote %x (%s)", m.ID, m.Name))
			}
			delete(prev, m.ID)
		}
		for id, m := range prev {
			what = append(what, fmt.Sprintf("remove %x (%s)", id, m.Name))
		}
		if len(what) > 0 {
			sort.Strings(what)
			out = append(out, Change{Since: h[i].Since, At: h[i].At, What: what})
		}
	}
	return out
}

// RemovedAt returns, for a history, when each removed member ID was first
// seen gone (a member list that lacked it after one that had it).
func RemovedAt(h []invariant.Membership) map[uint64]time.Time {
	out := map[uint64]time.Time{}
	for i := 1; i < len(h); i++ {
		for _, m := range h[i-1].Members {
			if _, done := out[m.ID]; done {
				continue
			}
			if !slices.ContainsFunc(h[i].Members, func(n invariant.Member) bool { return n.ID == m.ID }) {
				out[m.ID] = h[i].At
			}
		}
	}
	return out
}

// Window is a span of time a majority-mode fault held two members down.
type Window struct {
	From, To time.Time
	Episode  int
}

// AuditMembership checks the history of member lists against the Lease:
// no ID comes back after its removal, at most one learner at a time, every
// change happened while some agent held the Lease (its tenure overlaps the
// interval in which the watch saw the change), and none while a majority
// was down.
func AuditMembership(h []invariant.Membership, tenures []Tenure, majority []Window) []string {
	var out []string
	removed := map[uint64]time.Time{}
	for i, ms := range h {
		learners := 0
		for _, m := range ms.Members {
			if m.Learner {
				learners++
			}
			if at, ok := removed[m.ID]; ok {
				out = append(out, fmt.Sprintf("member ID %x (%s) in the member list again at %s after its removal by %s",
					m.ID, m.Name, ms.At.Format("15:04:05.000"), at.Format("15:04:05.000")))
				delete(removed, m.ID) // once
			}
		}
		if learners > 1 {
			out = append(out, fmt.Sprintf("%d learners at once at %s", learners, ms.At.Format("15:04:05.000")))
		}
		if i > 0 {
			for _, m := range h[i-1].Members {
				if !slices.ContainsFunc(ms.Members, func(n invariant.Member) bool { return n.ID == m.ID }) {
					removed[m.ID] = ms.At
				}
			}
		}
	}
	for _, c := range Changes(h) {
		if !heldDuring(tenures, c.Since, c.At) {
			out = append(out, fmt.Sprintf("membership change [%s] seen between %s and %s without the Lease held by anyone",
				strings.Join(c.What, "; "), c.Since.Format("15:04:05.000"), c.At.Format("15:04:05.000")))
		}
		for _, w := range majority {
			// Seen by a poll inside the window (the list cannot be read
			// without quorum, so the one before may be long before it).
			if c.At.After(w.From) && !c.At.After(w.To.Add(time.Second)) {
				out = append(out, fmt.Sprintf("membership change [%s] while episode #%d held a majority down", strings.Join(c.What, "; "), w.Episode))
			}
		}
	}
	return out
}

// heldDuring says whether a tenure overlaps (since, at].
func heldDuring(ts []Tenure, since, at time.Time) bool {
	for _, t := range ts {
		if t.From.Before(at) && t.To.After(since) {
			return true
		}
	}
	return false
}
