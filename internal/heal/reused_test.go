package heal

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
)

// A routine poll that reused the other members' last probe
// (observation.PeersReused) is never decided on: the healer observes every
// member afresh first, and the quarantine prune waits for a full
// observation (the reused one's alarms and peers are up to
// --peer-probe-interval old).
func TestTheHealerNeverDecidesOnAReusedProbe(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC()
	reused := memberstate.Result{Observation: observation.Observation{At: now, ClusterID: 1, LeaderID: 0xa1, PeersReused: true},
		Verdict: memberstate.Verdict{State: memberstate.Lost}}
	fresh := memberstate.Result{Observation: observation.Observation{At: now, ClusterID: 1, LeaderID: 0xa1},
		Verdict: memberstate.Verdict{State: memberstate.Healthy}}
	obs := &fakeObserver{res: []memberstate.Result{fresh}}
	l := &freeLease{}
	h := New(Config{Member: "node2", Node: "node2", StateDir: dir, QuarantineDir: dir,
		Plan: plan.Config{AutoHeal: true, MaxLearnerLag: 1000}, RecoveryTimeout: time.Minute, QuarantinePruneAfter: time.Minute,
		StepInterval: time.Millisecond, Log: zap.NewNop()},
		obs, func(uint64) (Lease, error) { return l, nil }, nil, nil, metrics.New())
	out := h.Consider(context.Background(), reused, nil)
	if obs.n != 1 || l.tries != 0 || out.Decision.Action == plan.Begin {
		t.Fatalf("a reused Lost result: %d fresh observations, %d Lease tries, decision %+v; want one fresh observation decided on (healthy: nothing)",
			obs.n, l.tries, out.Decision)
	}
	healthyReused := reused
	healthyReused.Verdict.State = memberstate.Healthy
	h.Housekeep(healthyReused)
	if !h.healthySince.IsZero() {
		t.Fatalf("the prune counted a reused observation as healthy since %s", h.healthySince)
	}
	h.Housekeep(fresh)
	if h.healthySince.IsZero() {
		t.Fatal("a full healthy observation does not start the prune's healthy run")
	}
	// A reused poll may still end the healthy run (never start it).
	h.Housekeep(reused)
	if !h.healthySince.IsZero() {
		t.Fatal("an unhealthy reused observation did not end the prune's healthy run")
	}
}

// The prune's healthy run ends on any result that is not healthy, also one
// whose recovery was refused (a refusal never reaches Housekeep): a member
// repaired by hand afterwards starts a new run.
func TestARefusedUnhealthyResultEndsThePrunesHealthyRun(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC()
	healthy := memberstate.Result{Observation: observation.Observation{At: now, ClusterID: 1}, Verdict: memberstate.Verdict{State: memberstate.Healthy}}
	lost := memberstate.Result{Observation: observation.Observation{At: now, ClusterID: 1}, Verdict: memberstate.Verdict{State: memberstate.Lost}}
	l := &freeLease{}
	h := New(Config{Member: "node2", Node: "node2", StateDir: dir, QuarantineDir: dir,
		Plan: plan.Config{AutoHeal: true, MaxLearnerLag: 1000}, RecoveryTimeout: time.Minute, QuarantinePruneAfter: time.Minute,
		StepInterval: time.Millisecond, Log: zap.NewNop()},
		sameObserver{lost}, func(uint64) (Lease, error) { return l, nil }, nil, nil, metrics.New())
	h.Housekeep(healthy)
	if h.healthySince.IsZero() {
		t.Fatal("no healthy run started")
	}
	if out := h.Consider(context.Background(), lost, nil); out.Decision.Action != plan.Refuse {
		t.Fatalf("want a refusal to decide on (the cluster shows no quorum), got %+v", out.Decision)
	}
	if !h.healthySince.IsZero() {
		t.Fatal("a refused unhealthy result left the prune's healthy run going")
	}
}
