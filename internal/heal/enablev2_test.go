package heal

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Issue 40: etcd 3.5's v2 API keeps data a v3 snapshot lacks; a learner
// seeded from one would miss it. A member whose manifest enables it
// rejoins in raft mode (v2-store-enabled), refused before any stream and
// with the data dir left as it was.
func TestSeedModeFallsBackToRaftWhenTheMemberEnablesTheV2API(t *testing.T) {
	res := lostWith("corrupt")
	for i := range res.Observation.Members {
		res.Observation.Members[i].Version = "3.5.36" // a cluster seed mode admits
	}
	r := newRig(t, res)
	r.h.cfg.EnableV2 = true
	j := journal.Record{NewMemberID: 0xa9}
	err := r.h.seedDataDir(context.Background(), res, &j, plan.SeedFollower)
	if !errors.Is(err, peerseed.ErrSeedV2StoreEnabled) || peerseed.SeedReason(err) != "v2-store-enabled" {
		t.Fatalf("seedDataDir = %v (%s), want %v", err, peerseed.SeedReason(err), peerseed.ErrSeedV2StoreEnabled)
	}
	if _, err := os.Stat(r.h.cfg.DataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if j.SeedSource != "" || j.SeedIndex != 0 {
		t.Fatalf("journal says seeded: %+v", j)
	}
}

// The storage version check (peerseed.WithServingVersion) gets the serving
// members' version; members that do not serve have no say.
func TestServingVersionIsTheServingMembers(t *testing.T) {
	res := lostWith("corrupt")
	for i := range res.Observation.Members {
		res.Observation.Members[i].Version = ""
		if res.Observation.Members[i].Serving {
			res.Observation.Members[i].Version = "3.5.36"
		}
	}
	if got := servingVersion(res.Observation); got != "3.5.36" {
		t.Fatalf("servingVersion = %q, want 3.5.36", got)
	}
	res.Observation.Members = nil
	if got := servingVersion(res.Observation); got != "" {
		t.Fatalf("servingVersion of no members = %q, want \"\"", got)
	}
}

// The refusal is a seed fallback like any other: raft mode, the reason in
// the journal and in etcd_agent_seed_fallbacks_total{reason}.
func TestAV2StoreEnabledFallbackIsJournaledAndCounted(t *testing.T) {
	res := lostWith("corrupt")
	for i := range res.Observation.Members {
		res.Observation.Members[i].Version = "3.5.36"
	}
	r := newRig(t, res)
	r.h.cfg.RejoinMode = RejoinSeed
	r.h.cfg.EnableV2 = true
	j := journal.Record{ID: "j1", NewMemberID: 0xa9}
	if err := r.h.prepareDataDir(context.Background(), res, &j, plan.ChooseSeed(j, r.h.planConfig())); err != nil {
		t.Fatal(err)
	}
	if j.RejoinMode != RejoinRaft || j.SeedFallback != "v2-store-enabled" {
		t.Fatalf("journal rejoin %q, fallback %q: want raft, v2-store-enabled", j.RejoinMode, j.SeedFallback)
	}
	if n := testutil.ToFloat64(r.m.SeedFallbacksTotal.WithLabelValues(r.h.cfg.Member, "v2-store-enabled")); n != 1 {
		t.Fatalf("etcd_agent_seed_fallbacks_total{reason=v2-store-enabled} = %v, want 1", n)
	}
}
