package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/record"
	"go.uber.org/zap"
)

// From the review: a member state dir is keyed by namespace and pod name,
// so a later pod of that name on this node (its hosted cluster deleted and
// created again) would inherit the old member's pin, journal and hold: its
// gate would hold the new cluster's first start for good. The dir records
// the claim it belongs to; another claim's dir is set aside (never deleted).
func TestAMemberStateDirOfAnEarlierClaimIsSetAside(t *testing.T) {
	root := t.TempDir()
	dir := MemberStateDir(root, "clusters-a", "etcd-0")
	pm := membersource.PodMember{Namespace: "clusters-a", Name: "etcd-0", PVC: "data-etcd-0", PVCUID: "claim-1"}
	if err := claimStateDir(dir, pm, "etcd-0", zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if err := pin.Save(dir, pin.Pin{Member: "etcd-0", ClusterID: 0xc1, MemberID: 7}); err != nil {
		t.Fatal(err)
	}
	// The same claim again (an agent restart, a UC2 heal): kept.
	if err := claimStateDir(dir, pm, "etcd-0", zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := pin.Load(dir, "etcd-0"); !ok {
		t.Fatal("the pin of the same claim was set aside")
	}
	// A new claim: the old dir is set aside, whole.
	pm.PVCUID = "claim-2"
	if err := claimStateDir(dir, pm, "etcd-0", zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := pin.Load(dir, "etcd-0"); ok {
		t.Fatal("a new claim inherited the old member's pin")
	}
	aside, _ := filepath.Glob(dir + ".claim-1.*")
	if len(aside) != 1 {
		t.Fatalf("set-aside dirs %v", aside)
	}
	if _, ok, _ := pin.Load(aside[0], "etcd-0"); !ok {
		t.Fatal("the old pin was not kept in the set-aside dir")
	}
	// Mid-recovery under the old claim: never set aside (the journal resumes).
	pm.PVCUID = "claim-3"
	if err := journal.Save(dir, record.Record{Member: "etcd-0", ID: "j1", Phase: record.PhaseStopped}); err != nil {
		t.Fatal(err)
	}
	if err := claimStateDir(dir, pm, "etcd-0", zap.NewNop()); err == nil || !strings.Contains(err.Error(), "recovery") {
		t.Fatalf("a dir with an open recovery must not be set aside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, claimFile)); err != nil {
		t.Fatal(err)
	}
	// From the pod move's review: a move that removed its member and
	// released the claim, and whose agent died before closing its journal,
	// leaves nothing to resume here: a member back on a new claim is served.
	if err := journal.Save(dir, record.Record{Member: "etcd-0", ID: "j2", Request: "move-away", Phase: record.PhaseRemoved}); err != nil {
		t.Fatal(err)
	}
	if err := claimStateDir(dir, pm, "etcd-0", zap.NewNop()); err == nil {
		t.Fatal("a move's open journal whose claim was not released was set aside")
	}
	if err := journal.Save(dir, record.Record{Member: "etcd-0", ID: "j2", Request: "move-away", Phase: record.PhaseRemoved, ClaimReleasedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := claimStateDir(dir, pm, "etcd-0", zap.NewNop()); err != nil {
		t.Fatalf("a released move's dir must be set aside: %v", err)
	}
	if j, ok, _ := journal.Load(dir, "etcd-0"); ok && j.Active() {
		t.Fatal("the new claim inherited the move's open journal")
	}
}

// From the review of the claim check: an attempt on the old claim cancelled
// when its loop restarts under the new claim (begun, its stop refused or
// never tried) left nothing on the old claim: its state dir is set aside and
// the member on the new claim is served. Once the member was held at its
// gate (the pod deleted, or about to be), or any step was done, it is not.
func TestAnAttemptThatDidNothingOnTheOldClaimDoesNotBlockTheNewOne(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rec     record.Record
		hold    bool
		setAway bool
	}{
		{"begun, stop refused", record.Record{Phase: record.PhaseStarted, StopAttemptedAt: time.Now()}, false, true},
		{"begun, nothing tried", record.Record{Phase: record.PhaseStarted}, false, true},
		{"begun, held at the gate", record.Record{Phase: record.PhaseStarted, StopAttemptedAt: time.Now()}, true, false},
		{"stopped", record.Record{Phase: record.PhaseStopped, StopAttemptedAt: time.Now()}, false, false},
		{"a rollback of a stranded learner", record.Record{Phase: record.PhaseStarted, Kind: record.KindRollbackLearner}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := MemberStateDir(t.TempDir(), "clusters-a", "etcd-0")
			pm := membersource.PodMember{Namespace: "clusters-a", Name: "etcd-0", PVC: "data-etcd-0", PVCUID: "claim-1"}
			if err := claimStateDir(dir, pm, "etcd-0", zap.NewNop()); err != nil {
				t.Fatal(err)
			}
			rec := tc.rec
			rec.Member, rec.ID = "etcd-0", "j1"
			if err := journal.Save(dir, rec); err != nil {
				t.Fatal(err)
			}
			if tc.hold {
				if err := os.WriteFile(filepath.Join(dir, memberruntime.HoldFile), []byte(`{"reason":"stopped by the agent for a rejoin"}`), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			pm.PVCUID = "claim-2"
			err := claimStateDir(dir, pm, "etcd-0", zap.NewNop())
			if tc.setAway && err != nil {
				t.Fatalf("not set aside: %v", err)
			}
			if !tc.setAway && (err == nil || !strings.Contains(err.Error(), "by hand")) {
				t.Fatalf("%v, want the dir kept for a person", err)
			}
			if j, _, _ := journal.Load(dir, "etcd-0"); tc.setAway == j.Active() {
				t.Fatalf("journal active %v in the member's dir, set aside %v", j.Active(), tc.setAway)
			}
		})
	}
}
