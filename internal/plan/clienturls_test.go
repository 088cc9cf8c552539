package plan

import (
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

func asideSupported(version string) opt {
	return func(s *spec) { s.in.CanSetClientURLsAside, s.in.LearnerVersion = true, version }
}

func asideNow() opt { return func(s *spec) { s.in.ClientURLsAside = true } }

// Only a 3.5 learner whose runtime can do it starts with its client URLs
// set aside (a 3.5 learner refuses writes with Unavailable; issue 40).
func TestOnlyA35LearnerStartsWithItsClientURLsAside(t *testing.T) {
	gone := local(localGone)
	for _, c := range []struct {
		name string
		opt  opt
		want bool
	}{
		{"3.5 on static pods", asideSupported("3.5.36"), true},
		{"3.6 on static pods", asideSupported("3.6.16"), false},
		{"3.5.0", asideSupported("3.5.0"), true},
		{"version unknown", asideSupported(""), false},
		{"3.5, a runtime that cannot", func(s *spec) { s.in.LearnerVersion = "3.5.36" }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(cluster(2, 2, gone, c.opt, held(record.PhaseRemoved)))
			want(t, d, AddLearner, ReasonNone)
			if d.AsideClientURLs != c.want {
				t.Errorf("add: aside %v, want %v", d.AsideClientURLs, c.want)
			}
			d = Decide(cluster(2, 2, gone, c.opt, unstartedLearner(18), held(record.PhasePrepared, newID(18))))
			want(t, d, StartMember, ReasonNone)
			if d.AsideClientURLs != c.want {
				t.Errorf("start: aside %v, want %v", d.AsideClientURLs, c.want)
			}
		})
	}
}

// Once promoted, a member started aside is restarted on its own client
// URLs before the verify; while it serves, only if the others keep quorum.
func TestAPromotedMemberGetsItsClientURLsBackWithoutLosingQuorum(t *testing.T) {
	gone := local(localGone)
	downVoter := member(observation.Member{ID: id(18), Name: localName, PeerURLs: []string{localPeer}})
	for _, c := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
	}{
		{"3 of 3 healthy", []opt{gone, ourVoter(18), asideNow()}, RestoreClientURLs, ReasonNone},
		{"verified already", []opt{gone, ourVoter(18), asideNow()}, RestoreClientURLs, ReasonNone},
		// Not held waiting with the Lease: the rejoin ends, the member
		// serves; the restart is made later under a record of its own.
		{"another voter down", []opt{ourVoter(18), asideNow()}, Finish, ReasonWouldLoseQuorum},
		{"ours down (its restart under way)", []opt{gone, downVoter, asideNow()}, RestoreClientURLs, ReasonNone},
		{"nothing aside", []opt{gone, ourVoter(18)}, Verify, ReasonNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			healthy := 2
			if c.reason == ReasonWouldLoseQuorum {
				healthy = 1
			}
			phase := record.PhasePromoted
			if c.name == "verified already" {
				phase = record.PhaseVerified
			}
			opts := append([]opt{held(phase, newID(18))}, c.opts...)
			if c.reason == ReasonWouldLoseQuorum {
				opts = append(opts, gone)
			}
			d := Decide(cluster(2, healthy, opts...))
			want(t, d, c.action, c.reason)
			if d.Action == RestoreClientURLs && d.MemberID != id(18) {
				t.Errorf("restore %x, want %x", d.MemberID, id(18))
			}
		})
	}
}

func restoreRecord(r *record.Record) { r.Kind = record.KindRestoreClientURLs }

// A member whose rejoin ended before it got its client URLs back (timed
// out waiting for a quorum to restart it) is restarted on them later,
// under the Lease, as a record of its own, on the same rule (helper 26's
// review of issue 40: before, it served on a URL no client has for good).
func TestAMemberLeftWithItsClientURLsAsideIsRestartedUnderALeaseOfItsOwn(t *testing.T) {
	healthy := local(localHealthy)
	for _, c := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
	}{
		{"healthy voter, 3 of 3", []opt{healthy, asideNow()}, BeginRestoreClientURLs, ReasonNone},
		{"another voter down", []opt{healthy, asideNow(), func(s *spec) { s.healthy = 2 }}, Nothing, ReasonWouldLoseQuorum},
		{"Lease held by another", []opt{healthy, asideNow(), leaseOther("node2/node2")}, Refuse, ReasonLeaseHeldByOther},
		{"no API", []opt{healthy, asideNow(), noAPI()}, Refuse, ReasonAPIUnavailable},
		{"dry run", []opt{healthy, asideNow(), cfg(func(c *Config) { c.DryRun = true })}, Refuse, ReasonDryRun},
		{"auto-heal off", []opt{healthy, asideNow(), cfg(func(c *Config) { c.AutoHeal = false })}, Nothing, ReasonAutoHealDisabled},
		{"after a failure, in its backoff", []opt{healthy, asideNow(), failed(1, t0.Add(-10*time.Second))}, Nothing, ReasonBackoff},
		{"lost, not serving: its own heal puts them back", []opt{asideNow(), func(s *spec) { s.healthy = 2 }}, Begin, ReasonNone},
		{"nothing aside", []opt{healthy}, Nothing, ReasonNone},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(cluster(3, 3, c.opts...))
			want(t, d, c.action, c.reason)
			if d.Action == BeginRestoreClientURLs && d.MemberID != id(1) {
				t.Errorf("restart %x, want the local member %x", d.MemberID, id(1))
			}
		})
	}
	// The record, with the Lease, on a fresh observation.
	want(t, Decide(cluster(3, 3, healthy, asideNow(), held(record.PhaseStarted, restoreRecord, newID(1)))), RestoreClientURLs, ReasonNone)
	// Back on its own URLs: the Lease is kept until it serves on them.
	want(t, Decide(cluster(3, 3, healthy, held(record.PhaseStarted, restoreRecord, newID(1)))), Verify, ReasonNone)
	want(t, Decide(cluster(3, 3, healthy, held(record.PhaseVerified, restoreRecord, newID(1)))), Finish, ReasonNone)
	// Nothing waits with the Lease held (the voter it waits for needs it).
	want(t, Decide(cluster(3, 2, healthy, asideNow(), held(record.PhaseStarted, restoreRecord, newID(1)))), Finish, ReasonWouldLoseQuorum)
	want(t, Decide(cluster(3, 3, healthy, asideNow(), held(record.PhaseStarted, restoreRecord, newID(7)))), Finish, ReasonNotNeeded)
}
