package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

// From issue 38: a pod move whose claim and held pod were released closed
// succeeded at once, before its member served anywhere. It now has a
// deadline and closes succeeded only once its member (its name, a new ID)
// is a voter that answers and the target's agent answered the move
// verified (rejoined, promoted, HashKV equal: its last-recovery on the
// pod, naming that member); it waits for that without the Lease (the
// target's agent takes it to add the learner), saying at every poll what it
// waits for and how much of the deadline is left, and fails at the
// deadline with nothing more done.
func TestAReleasedPodMoveSucceedsOnlyWhenItsMemberServesVerifiedOnTheTarget(t *testing.T) {
	released := func(mods ...func(*ClaimFacts)) opt {
		return podMove(append([]func(*ClaimFacts){func(c *ClaimFacts) {
			c.ReservedPV, c.ClaimBound, c.PodOnNode, c.OldPVRetained, c.PodNode = "pv-9", false, false, true, "node9"
		}}, mods...)...)
	}
	journal := awayJournal(record.PhaseRemoved, oldID(id(1)), func(r *record.Record) { r.ClaimReleasedAt = t0 })
	after := func(d time.Duration) opt { return func(s *spec) { s.in.Now = t0.Add(d) } }
	deadline := cfg(func(c *Config) { c.MoveDeadline = 10 * time.Minute })
	moved := func(serving, learner bool) opt {
		return member(observation.Member{ID: id(9), Name: localName, PeerURLs: []string{peer(9)}, Serving: serving, IsLearner: learner,
			RaftIndex: leaderIndex, AppliedIndex: leaderIndex})
	}
	answered := func(result string, member uint64) func(*ClaimFacts) {
		return func(c *ClaimFacts) {
			c.TargetAnswer = &MoveAnswer{Result: result, Reason: "", Message: "member rejoined, promoted and verified", MemberID: member, ThisAsk: true}
		}
	}
	for _, c := range []struct {
		name   string
		opts   []opt
		action Action
		reason Reason
		says   string // in the detail: what it waits for, the deadline
	}{
		{"released, the pod not yet on the target", []opt{leaseHeld(), after(time.Minute), released(func(c *ClaimFacts) { c.PodNode = "" })},
			Nothing, ReasonAwaitingMoveTarget, "scheduled on node9"},
		{"released, the member not yet added", []opt{leaseHeld(), after(time.Minute), released()}, Nothing, ReasonAwaitingMoveTarget, "9m0s left"},
		{"the target's agent holds the Lease (adding the learner)", []opt{leaseOther("node9/node1"), after(time.Minute), released()},
			Nothing, ReasonAwaitingMoveTarget, "as a learner"},
		{"the Lease free: waited for without it", []opt{after(time.Minute), released()}, Nothing, ReasonAwaitingMoveTarget, "1m0s of 10m0s"},
		{"the member a learner on the target", []opt{after(time.Minute), moved(true, true), released()}, Nothing, ReasonAwaitingMoveTarget, "promoted"},
		{"the member a voter that does not answer", []opt{after(time.Minute), moved(false, false), released()}, Nothing, ReasonAwaitingMoveTarget, "to answer"},
		{"a serving voter, not yet verified by the target's agent", []opt{after(time.Minute), moved(true, false), released()},
			Nothing, ReasonAwaitingMoveTarget, "verified"},
		{"the target's agent answered failed (it tries again)", []opt{after(time.Minute), moved(true, false), released(answered("failed", id(9)))},
			Nothing, ReasonAwaitingMoveTarget, "answered failed"},
		{"verified, but for another member ID", []opt{after(time.Minute), moved(true, false), released(answered("succeeded", id(8)))},
			Nothing, ReasonAwaitingMoveTarget, "verified"},
		{"a serving voter verified by the target's agent: succeeded", []opt{after(time.Minute), moved(true, false), released(answered("succeeded", id(9)))},
			Finish, ReasonNone, "verified"},
		{"the objects unreadable meanwhile: still waiting, nothing destructive", []opt{after(time.Minute), released(func(c *ClaimFacts) { c.Err = "timeout" })},
			Nothing, ReasonAwaitingMoveTarget, "timeout"},
		{"the deadline passed, no member: failed", []opt{leaseHeld(), after(10*time.Minute + time.Second), released()}, Finish, ReasonMoveTimedOut, "10m0s"},
		{"the deadline passed, a voter never verified: failed", []opt{after(11 * time.Minute), moved(true, false), released()}, Finish, ReasonMoveTimedOut, "verified"},
	} {
		opts := append([]opt{local(localGone), journal, deadline}, c.opts...)
		d := Decide(cluster(2, 2, opts...))
		if d.Action != c.action || d.Reason != c.reason || !strings.Contains(d.Detail, c.says) {
			t.Errorf("%s: %s/%s (%s), want %s/%s saying %q", c.name, d.Action, d.Reason, d.Detail, c.action, c.reason, c.says)
		}
	}
	// Without a configured deadline, the default bounds it.
	d := Decide(cluster(2, 2, local(localGone), journal, released(), after(defaultMoveDeadline+time.Second)))
	if d.Action != Finish || d.Reason != ReasonMoveTimedOut {
		t.Errorf("no deadline configured, %s after the release: %s/%s (%s), want finish/move-timed-out", defaultMoveDeadline, d.Action, d.Reason, d.Detail)
	}
}

// Review (session 26): a claim released by someone else (a StatefulSet's
// PVC retention policy, a person) leaves ClaimReleasedAt unjournaled (only
// our own StewardDeletePVC stamps it), and a zero time made the move look
// waited for since year 1: failed move-timed-out at once. Without a
// journaled release it has waited for nothing yet; the attempt's own
// timeout bounds it and the settle then journals the release.
func TestAMoveReleasedByAnotherHandIsNotTimedOutAtOnce(t *testing.T) {
	released := podMove(func(c *ClaimFacts) {
		c.ReservedPV, c.ClaimBound, c.ClaimDeleting, c.PodOnNode, c.OldPVRetained, c.PodNode = "pv-9", true, true, false, true, "node9"
	})
	d := Decide(cluster(2, 2, local(localGone), leaseHeld(), awayJournal(record.PhaseRemoved, oldID(id(1))), released,
		cfg(func(c *Config) { c.MoveDeadline = 30 * time.Minute }), func(s *spec) { s.in.Now = t0.Add(time.Minute) }))
	if d.Reason == ReasonMoveTimedOut {
		t.Fatalf("%s/%s (%s): a move released by another hand timed out at once", d.Action, d.Reason, d.Detail)
	}
}
