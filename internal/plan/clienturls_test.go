package plan

import (
	"testing"

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
		{"another voter down", []opt{ourVoter(18), asideNow()}, Nothing, ReasonWouldLoseQuorum},
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
