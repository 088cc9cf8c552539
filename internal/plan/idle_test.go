package plan

// Tables for the idle path: no recovery is open; is one wanted, and is it
// safe to begin? (docs/design.md §4, rules 1-3, 6, 7, 10.)

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

func TestBeginsRejoinOfLostMemberWhileQuorumHolds(t *testing.T) {
	forN(t, 1, 7, func(t *testing.T, n int) {
		for k := q(n); k <= n-1; k++ {
			want(t, Decide(cluster(n, k)), Begin, ReasonNone)
			want(t, Decide(cluster(n, k, request())), Begin, ReasonNone)
			// Not in the list at all (UC1: a new node): nothing to remove, add it.
			want(t, Decide(cluster(n, k, local(localGone))), Begin, ReasonNone)
			// Data dir intact but the member is lost after the grace period.
			want(t, Decide(cluster(n, k, local(localDown), verdict(memberstate.Lost))), Begin, ReasonNone)
		}
	})
	d := Decide(cluster(3, 2))
	if !strings.Contains(d.Detail, fmt.Sprintf("remove member %x", id(1))) {
		t.Errorf("plan text %q does not name the member to remove", d.Detail)
	}
}

func TestRefusesWhenMajorityLost(t *testing.T) {
	forN(t, 1, 7, func(t *testing.T, n int) {
		// Fewer serving voters than a quorum, lost or healthy local member, auto or manual.
		for k := 0; k < q(n) && k <= n-1; k++ {
			for _, o := range []opt{request(), cfg(func(*Config) {}), local(localGone)} {
				want(t, Decide(cluster(n, k, o)), Refuse, ReasonMajorityLost)
			}
		}
		for k := 1; k < q(n); k++ {
			want(t, Decide(cluster(n, k, local(localHealthy), request())), Refuse, ReasonMajorityLost)
		}
		// Everyone else serves, but there is no leader, or no member list.
		if n > 1 {
			want(t, Decide(cluster(n, n-1, noLeader())), Refuse, ReasonMajorityLost)
			want(t, Decide(cluster(n, n-1, listError())), Refuse, ReasonMajorityLost)
		}
		want(t, Decide(cluster(n, n, local(localHealthy), noLeader(), request())), Refuse, ReasonMajorityLost)
		want(t, Decide(cluster(n, n, local(localHealthy), listError(), request())), Refuse, ReasonMajorityLost)
		// Quorum comes first: no API and a busy Lease do not hide it.
		if n > 1 {
			want(t, Decide(cluster(n, n-1, noLeader(), noAPI(), leaseOther("node2/node2"))), Refuse, ReasonMajorityLost)
		}
	})
}

func TestRefusesRemovalThatWouldLoseQuorum(t *testing.T) {
	// The local member still serves from open files (data dir wiped): stopping
	// it costs a serving voter, so serving-1 >= Q(n) is needed (rule 6).
	forN(t, 1, 7, func(t *testing.T, n int) {
		k := q(n) - 1 // healthy peers; serving = k+1 = Q(n): quorum holds, with no spare
		for _, v := range []memberstate.State{memberstate.Lost, memberstate.Degraded} {
			want(t, Decide(cluster(n, k, local(localWiped), verdict(v), request())), Refuse, ReasonWouldLoseQuorum)
		}
		want(t, Decide(cluster(n, k, local(localWiped), verdict(memberstate.Lost))), Refuse, ReasonWouldLoseQuorum)
		if k+1 <= n-1 {
			want(t, Decide(cluster(n, k+1, local(localWiped), verdict(memberstate.Lost))), Begin, ReasonNone)
		}
	})
}

func TestNeverActsOnHealthyMemberAutomatically(t *testing.T) {
	forN(t, 1, 7, func(t *testing.T, n int) {
		for _, class := range []string{"ok", "in-use"} {
			want(t, Decide(cluster(n, n, local(localHealthy), dataDir(class))), Nothing, ReasonNone)
			// Even if the verdict says lost (stale, or a bug upstream), the
			// observation shows a healthy member: refused.
			want(t, Decide(cluster(n, n, local(localHealthy), dataDir(class), verdict(memberstate.Lost))), Refuse, ReasonMemberHealthy)
		}
		want(t, Decide(cluster(n, n, local(localHealthy), verdict(memberstate.Learner))), Nothing, ReasonNone)
	})
}

func TestManualRequestOnHealthyMemberNeedsSpareQuorum(t *testing.T) {
	want(t, Decide(cluster(3, 3, local(localHealthy), request())), Begin, ReasonNone)
	want(t, Decide(cluster(3, 2, local(localHealthy), request())), Refuse, ReasonWouldLoseQuorum)
	forN(t, 1, 7, func(t *testing.T, n int) {
		for k := 1; k <= n; k++ { // k healthy voters, the local member among them
			d := Decide(cluster(n, k, local(localHealthy), request()))
			switch {
			case k < q(n):
				want(t, d, Refuse, ReasonMajorityLost)
			case k-1 < q(n):
				want(t, d, Refuse, ReasonWouldLoseQuorum)
			default:
				want(t, d, Begin, ReasonNone)
			}
		}
	})
}

func TestRefusesWhileAnotherLearnerExists(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		for _, o := range []opt{otherLearner(), member(learner(19, "node19", peer(19), false, 0))} {
			want(t, Decide(cluster(n, n-1, o)), Refuse, ReasonLearnerPresent)
			want(t, Decide(cluster(n, n-1, o, request())), Refuse, ReasonLearnerPresent)
			want(t, Decide(cluster(n, n-1, o, local(localGone))), Refuse, ReasonLearnerPresent)
		}
	})
}

func TestAmbiguousIdentityRefused(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		want(t, Decide(cluster(n, n-1, forceMatch(observation.MatchAmbiguous))), Refuse, ReasonAmbiguousIdentity)
		want(t, Decide(cluster(n, n-1, forceMatch(observation.MatchAmbiguous), request())), Refuse, ReasonAmbiguousIdentity)
		// A second member with our name (and another peer URL).
		dup := member(observation.Member{ID: id(10), Name: localName, PeerURLs: []string{peer(10)}, Serving: true})
		want(t, Decide(cluster(n, n-1, dup)), Refuse, ReasonAmbiguousIdentity)
		// A learner with our peer URL that no journal of ours explains:
		// unstarted (no name), or started under our name; fresh or after a
		// closed recovery.
		for _, l := range []opt{unstartedLearner(18), ourLearner(true, leaderIndex)} {
			want(t, Decide(cluster(n, n-1, local(localGone), l)), Refuse, ReasonAmbiguousIdentity)
			want(t, Decide(cluster(n, n-1, local(localGone), l, request())), Refuse, ReasonAmbiguousIdentity)
			want(t, Decide(cluster(n, n-1, local(localGone), l, failed(1, t0.Add(-time.Hour)))), Refuse, ReasonAmbiguousIdentity)
		}
	})
}

func TestInGracePeriodDoesNothing(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		want(t, Decide(cluster(n, n-1, local(localDown))), Nothing, ReasonInGracePeriod)
		want(t, Decide(cluster(n, n-1, local(localLost), verdict(memberstate.Down))), Nothing, ReasonInGracePeriod)
		want(t, Decide(cluster(n, n-1, local(localWiped))), Nothing, ReasonInGracePeriod)
		// A manual request does not wait for the grace period.
		want(t, Decide(cluster(n, n-1, local(localDown), request())), Begin, ReasonNone)
	})
}

func TestAutoHealDisabled(t *testing.T) {
	off := cfg(func(c *Config) { c.AutoHeal = false })
	forN(t, 3, 7, func(t *testing.T, n int) {
		want(t, Decide(cluster(n, n-1, off)), Nothing, ReasonAutoHealDisabled)
		want(t, Decide(cluster(n, n-1, off, request())), Begin, ReasonNone)
		want(t, Decide(cluster(n, n, off, local(localHealthy))), Nothing, ReasonNone)
	})
}

func TestBackoffAfterFailure(t *testing.T) {
	// RetryBackoff 1m doubles per consecutive failure, capped at 8m.
	for f, b := range map[int]time.Duration{1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute,
		4: 8 * time.Minute, 5: 8 * time.Minute, 9: 8 * time.Minute, 100: 8 * time.Minute} {
		t.Run(fmt.Sprintf("failures=%d", f), func(t *testing.T) {
			last := t0.Add(-b)
			want(t, Decide(cluster(3, 2, failed(f, last), at(t0.Add(-time.Nanosecond)))), Nothing, ReasonBackoff)
			want(t, Decide(cluster(3, 2, failed(f, last), at(last))), Nothing, ReasonBackoff)
			want(t, Decide(cluster(3, 2, failed(f, last))), Begin, ReasonNone)
			// A manual request is a human's call: no backoff.
			want(t, Decide(cluster(3, 2, failed(f, t0), request())), Begin, ReasonNone)
		})
	}
	// No failure time recorded, or failures reset: no backoff.
	want(t, Decide(cluster(3, 2, failed(3, time.Time{}))), Begin, ReasonNone)
	want(t, Decide(cluster(3, 2, failed(0, t0))), Begin, ReasonNone)
	// The backoff is checked only once a recovery is wanted.
	want(t, Decide(cluster(3, 3, local(localHealthy), failed(2, t0))), Nothing, ReasonNone)
}

func TestDiskFull(t *testing.T) {
	const db = 1 << 30
	need := AttemptBytesNeeded(db, false, true).Quarantine
	want(t, Decide(cluster(3, 2, dbSize(db), free(need-1))), Refuse, ReasonDiskFull)
	want(t, Decide(cluster(3, 2, dbSize(db), free(need-1), request())), Refuse, ReasonDiskFull)
	want(t, Decide(cluster(3, 2, dbSize(db), free(need))), Begin, ReasonNone)
	want(t, Decide(cluster(3, 2, dbSize(0), free(128*mib-1))), Refuse, ReasonDiskFull)
	// The largest member's db counts.
	big := member(observation.Member{ID: id(11), Name: "node11", PeerURLs: []string{peer(11)}, Serving: true, DBSize: 4 * db})
	want(t, Decide(cluster(3, 2, dbSize(db), free(need), big)), Refuse, ReasonDiskFull)
}

func TestAPIUnavailable(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		want(t, Decide(cluster(n, n-1, noAPI())), Refuse, ReasonAPIUnavailable)
		want(t, Decide(cluster(n, n-1, noAPI(), request())), Refuse, ReasonAPIUnavailable)
		// Nothing wanted: nothing to refuse.
		want(t, Decide(cluster(n, n, noAPI(), local(localHealthy))), Nothing, ReasonNone)
	})
}

func TestLeaseHeldByOther(t *testing.T) {
	forN(t, 3, 7, func(t *testing.T, n int) {
		d := Decide(cluster(n, n-1, leaseOther("node3/node3")))
		want(t, d, Refuse, ReasonLeaseHeldByOther)
		if !strings.Contains(d.Detail, "node3/node3") {
			t.Errorf("detail %q does not name the holder", d.Detail)
		}
		want(t, Decide(cluster(n, n-1, leaseOther("node3/node3"), request())), Refuse, ReasonLeaseHeldByOther)
	})
}

func TestDryRun(t *testing.T) {
	dry := cfg(func(c *Config) { c.DryRun = true })
	forN(t, 3, 7, func(t *testing.T, n int) {
		for _, o := range []opt{dry, dryRunRequest()} {
			d := Decide(cluster(n, n-1, o))
			want(t, d, Refuse, ReasonDryRun)
			if !strings.HasPrefix(d.Detail, "would: stop member node1") {
				t.Errorf("dry run detail %q does not say what it would do", d.Detail)
			}
			// A dry run of an unsafe recovery says why it is unsafe.
			want(t, Decide(cluster(n, q(n)-1, o)), Refuse, ReasonMajorityLost)
			want(t, Decide(cluster(n, n-1, o, otherLearner())), Refuse, ReasonLearnerPresent)
		}
		want(t, Decide(cluster(n, n, local(localHealthy), dryRunRequest())), Refuse, ReasonDryRun)
		want(t, Decide(cluster(n, n, local(localHealthy), dry)), Nothing, ReasonNone)
	})
	d := Decide(cluster(3, 2, local(localGone), dryRunRequest()))
	if !strings.Contains(d.Detail, "no remove") {
		t.Errorf("dry run detail %q: the member is not in the list, nothing to remove", d.Detail)
	}
}

func TestBadRequestRefused(t *testing.T) {
	for _, a := range []string{"move", "true", "Rejoin", "remove"} {
		want(t, Decide(cluster(3, 3, local(localHealthy), badRequest(a))), Refuse, ReasonBadRequest)
		want(t, Decide(cluster(3, 2, badRequest(a))), Refuse, ReasonBadRequest)
	}
	// An empty action means the default (and only) one: rejoin.
	want(t, Decide(cluster(3, 2, badRequest(""))), Begin, ReasonNone)
}

func TestRefusedReportsRefusalsOnly(t *testing.T) {
	if d := Decide(cluster(3, 1)); !d.Refused() {
		t.Errorf("%s/%q is a refusal", d.Action, d.Reason)
	}
	for _, d := range []Decision{Decide(cluster(3, 2)), Decide(cluster(3, 2, local(localDown)))} {
		if d.Refused() {
			t.Errorf("%s/%q is not a refusal", d.Action, d.Reason)
		}
	}
}

// onlyForeignAnswers: our cluster does not answer (no member list, no member of
// ours serves) and endpoints of another cluster do.
func onlyForeignAnswers() opt {
	return func(s *spec) {
		s.listErr, s.healthy = "no endpoint of cluster c1 answered", 0
		s.in.Obs.PinnedClusterID, s.in.Obs.ForeignEndpoints = 0xc1, []string{"https://10.0.0.99:2379"}
	}
}

func TestForeignClusterRefused(t *testing.T) {
	forN(t, 1, 5, func(t *testing.T, n int) {
		for _, o := range []opt{request(), verdict(memberstate.Lost), local(localGone)} {
			want(t, Decide(cluster(n, n-1, onlyForeignAnswers(), o)), Refuse, ReasonForeignCluster)
		}
	})
	// Never seen a member list of ours either: still foreign, not majority-lost.
	in, c := cluster(3, 2, onlyForeignAnswers())
	in.Obs.Members, in.Obs.LeaderID = nil, 0
	observation.MatchLocal(&in.Obs)
	want(t, Decide(in, c), Refuse, ReasonForeignCluster)
	// A foreign answer next to our serving cluster is ignored: the heal goes on.
	in, c = cluster(3, 2)
	in.Obs.PinnedClusterID, in.Obs.ForeignEndpoints = 0xc1, []string{"https://10.0.0.99:2379"}
	want(t, Decide(in, c), Begin, ReasonNone)
	if !slices.Contains(RefusalReasons(), ReasonForeignCluster) {
		t.Error("foreign-cluster is not in RefusalReasons")
	}
}

// Before anything is pinned, a data dir of another cluster than the one that
// answers is not healed into that cluster (review of issue 9: a recycled IP
// answered first, the good data dir read as foreign and lost at once).
func TestUnpinnedDataDirOfAnotherClusterIsNotHealedIntoTheAnsweringOne(t *testing.T) {
	in, c := cluster(3, 2, verdict(memberstate.Lost))
	in.Obs.ClusterID, in.Obs.Local.DataDirClusterID = 0xc1, 0xc9
	want(t, Decide(in, c), Refuse, ReasonForeignCluster)
	in.Obs.ClusterPinned = true // the pin says 0xc1 is ours: the data dir is the foreign one
	want(t, Decide(in, c), Begin, ReasonNone)
	in.Obs.ClusterPinned, in.Obs.Local.DataDirClusterID = false, 0xc1
	want(t, Decide(in, c), Begin, ReasonNone)
}
