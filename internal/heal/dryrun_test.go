package heal

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
)

// freeLease is a free Lease that records acquisition attempts and refuses
// them (so that a wrong resume stops at once, touching nothing else).
type freeLease struct{ tries int }

func (l *freeLease) TryAcquire(context.Context, lease.Info) error {
	l.tries++
	return lease.ErrHeldByOther
}
func (l *freeLease) SetPhase(context.Context, string) error          { return nil }
func (l *freeLease) ConfirmFor(context.Context, time.Duration) error { return lease.ErrNotHeld }
func (l *freeLease) Release(context.Context) error                   { return nil }
func (l *freeLease) Holding() bool                                   { return false }
func (l *freeLease) Current(context.Context) (string, lease.Info, bool, error) {
	return "", lease.Info{}, true, nil
}

type sameObserver struct{ res memberstate.Result }

func (o sameObserver) Observe(context.Context, time.Time) memberstate.Result { return o.res }

// An agent in dry-run with a recovery open (restarted with --dry-run
// mid-heal) reports it and does nothing: no Lease taken to resume, no step.
func TestConsiderDryRunWithOpenJournalChangesNothing(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC()
	j := journal.Record{ID: "r1", Member: "node2", Node: "node2", Request: "auto", Phase: journal.PhaseRemoved,
		StartedAt: now.Add(-time.Minute), OldMemberID: 0xa2, PeerURLs: []string{"http://10.0.0.2:2380"}}
	if err := journal.Save(dir, j); err != nil {
		t.Fatal(err)
	}
	voter := func(id uint64, name string) observation.Member {
		return observation.Member{ID: id, Name: name, PeerURLs: []string{"http://" + name + ":2380"},
			ClientURLs: []string{"http://" + name + ":2379"}, Serving: true, RaftIndex: 100, AppliedIndex: 100}
	}
	res := memberstate.Result{
		Observation: observation.Observation{At: now, ClusterID: 1, LeaderID: 0xa1,
			Members: []observation.Member{voter(0xa1, "node1"), voter(0xa3, "node3")},
			Local:   observation.Local{Name: "node2", PeerURLs: j.PeerURLs, DataDir: dir + "/etcd"}},
		Verdict: memberstate.Verdict{State: memberstate.Lost},
	}
	l := &freeLease{}
	h := New(Config{Member: "node2", Node: "node2", PeerURLs: j.PeerURLs, StateDir: dir, QuarantineDir: dir,
		Plan: plan.Config{AutoHeal: true, DryRun: true, MaxLearnerLag: 1000}, RecoveryTimeout: time.Minute,
		StepInterval: time.Millisecond, Log: zap.NewNop()},
		sameObserver{res}, func(uint64) (Lease, error) { return l, nil }, nil, nil, metrics.New())
	out := h.Consider(context.Background(), res, nil)
	if l.tries > 0 {
		t.Fatalf("the dry-run agent tried %d times to take the Lease to resume phase %s (outcome %+v)", l.tries, j.Phase, out.Decision)
	}
	if out.Decision.Action != plan.Refuse || out.Decision.Reason != plan.ReasonDryRun {
		t.Fatalf("outcome %+v, want a dry-run refusal", out.Decision)
	}
	after, _, err := journal.Load(dir, "node2")
	if err != nil || !after.Active() || after.Phase != journal.PhaseRemoved {
		t.Fatalf("journal after: phase %s result %q (%v), want open in phase removed", after.Phase, after.Result, err)
	}
	t.Logf("reported: %s", out.Decision.Detail)
}
