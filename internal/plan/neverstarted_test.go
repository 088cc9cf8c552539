package plan

import (
	"testing"
	"time"
)

// unstarted: the local member is in the list but has never published
// its client URLs, which etcd does at its first start.
func unstarted(in Input, c Config) (Input, Config) {
	for i := range in.Obs.Members {
		if in.Obs.Members[i].ID == id(1) {
			in.Obs.Members[i].ClientURLs = nil
		}
	}
	return in, c
}

// Issue 38's layout matrix (e2e TestStatefulSetMembersInRealWorldLayouts):
// at a new cluster's bootstrap, a member held at its gate (awaiting the
// agent's word on the cluster's past) has an empty data dir and does not
// serve, while its peers already do: it was judged lost at once and
// replaced before it ever ran. A member that has never started (it never
// published its client URLs in the member list, as etcd does at its first
// start) has lost nothing: with a missing or empty data dir it is waited
// for, never replaced unasked. A manual rejoin still goes ahead, and a
// member that has run is healed as before.
func TestAMemberThatNeverStartedIsNotReplaced(t *testing.T) {
	for _, class := range []string{"missing", "empty"} {
		want(t, Decide(unstarted(cluster(3, 2, dataDir(class)))), Nothing, ReasonNeverStarted)
		want(t, Decide(cluster(3, 2, dataDir(class))), Begin, ReasonNone)
		want(t, Decide(unstarted(cluster(3, 2, dataDir(class), func(s *spec) { s.in.Request = &Request{Action: "rejoin"} }))), Begin, ReasonNone)
	}
	// Member data in it (seen: a bootstrap's db written before its WAL,
	// read corrupt by the deep check): its first start may be under way,
	// so it is given neverStartedPatience from its trouble's start.
	troubled := func(ago time.Duration) opt {
		return func(s *spec) { s.dataDir, s.verdictSince = "corrupt", t0.Add(-ago) }
	}
	want(t, Decide(unstarted(cluster(3, 2, troubled(time.Second)))), Nothing, ReasonNeverStarted)
	want(t, Decide(unstarted(cluster(3, 2, troubled(neverStartedPatience)))), Begin, ReasonNone)
}
