package heal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// A member left serving with its client URLs set aside (its rejoin ended
// first) is restarted on its own under the Lease, as a record of its own,
// and the Lease is released (helper 26's review of issue 40).
func TestAMemberLeftAsideIsRestartedOnItsOwnClientURLs(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	r := newRig(t, res, res, res, res)
	r.rt.aside = "https://10.0.0.1:12379"
	out := r.h.Consider(context.Background(), res, nil)
	if r.rt.starts != 1 || r.rt.aside != "" {
		t.Fatalf("restarts %d, still aside %q (outcome %+v)", r.rt.starts, r.rt.aside, out)
	}
	j := r.journal(t)
	if j.Kind != journal.KindRestoreClientURLs || j.Result != journal.ResultSucceeded || j.Active() || j.ClientURLsRestoredAt.IsZero() {
		t.Fatalf("journal %+v", j)
	}
	if r.lease.Holding() {
		t.Fatal("the Lease is still held")
	}
}

// A 3.5 learner whose client URLs cannot be set aside (a host name, an
// address not on this node, etcd's default flags) is started as it is:
// the member is healed, not left out (helper 26's review of issue 40).
func TestALearnerWhoseClientURLsCannotBeSetAsideStartsAsItIs(t *testing.T) {
	for _, c := range []struct {
		name      string
		cannot    error
		wantAside bool
	}{
		{"feasible", nil, true},
		{"not feasible (seen before the add)", errors.New("client URL https://vm:2379: its host is not an IP"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			r.rt.cannotAside = c.cannot
			r.h.cfg.LearnerVersion = func() string { return "3.5.36" }
			in := r.h.baseInput(memberstate.Result{Observation: observation.Observation{}}, nil, journal.Record{})
			if in.CanSetClientURLsAside != c.wantAside {
				t.Fatalf("CanSetClientURLsAside %v, want %v", in.CanSetClientURLsAside, c.wantAside)
			}
		})
	}
	// Feasible when decided, failing when tried: started as it is.
	r := newRig(t)
	r.rt.failAside = errors.New("no free port on 10.0.0.1")
	j := journal.Record{ID: "j1", Member: "m1", PeerURLs: []string{peerURL(1)}}
	if err := r.h.startMember(context.Background(), cluster3(memberstate.Lost, 2, 3), &j, plan.Decision{Action: plan.StartMember, AsideClientURLs: true}); err != nil {
		t.Fatal(err)
	}
	if r.rt.starts != 1 || r.rt.aside != "" || j.ClientURLsAside != "" {
		t.Fatalf("plain starts %d, aside %q, journal aside %q: want one plain start", r.rt.starts, r.rt.aside, j.ClientURLsAside)
	}
}

// The restart record keeps the Lease until the member serves on its own
// URLs again (released at the manifest's write, another agent could stop
// its member on an observation that still counts this one), and never
// waits with it held for a quorum (helper 27's review of issue 40).
func TestTheRestartRecordHoldsTheLeaseOnlyWhileItActs(t *testing.T) {
	t.Run("kept until the member serves again", func(t *testing.T) {
		healthy := cluster3(memberstate.Healthy, 1, 2, 3)
		restarting := cluster3(memberstate.Down, 2, 3)
		r := newRig(t, healthy, restarting, restarting, restarting, restarting, restarting, restarting)
		r.rt.aside = "https://10.0.0.1:12379"
		start := time.Now()
		r.h.Consider(context.Background(), healthy, nil) // the recovery timeout (2 s) ends it
		j := r.journal(t)
		if r.rt.starts != 1 || j.Result != journal.ResultFailed || time.Since(start) < 2*time.Second {
			t.Fatalf("restarted %d, journal %s/%s after %s: want the Lease held (no success) while the member does not serve", r.rt.starts, j.Result, j.Reason, time.Since(start))
		}
	})
	t.Run("no quorum to restart: refused, the Lease released", func(t *testing.T) {
		healthy := cluster3(memberstate.Healthy, 1, 2, 3)
		twoOfThree := cluster3(memberstate.Healthy, 1, 2)
		r := newRig(t, twoOfThree, twoOfThree, twoOfThree)
		r.rt.aside = "https://10.0.0.1:12379"
		start := time.Now()
		r.h.Consider(context.Background(), healthy, nil)
		j := r.journal(t)
		if r.rt.starts != 0 || j.Result != journal.ResultRefused || j.Reason != string(plan.ReasonWouldLoseQuorum) || r.lease.Holding() || j.Failures != 0 {
			t.Fatalf("restarts %d, journal %s/%s failures %d, Lease held %v", r.rt.starts, j.Result, j.Reason, j.Failures, r.lease.Holding())
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("held the Lease %s waiting for a quorum", took)
		}
	})
}
