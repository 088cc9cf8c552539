package heal

import (
	"context"
	"errors"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
	"go.uber.org/zap"
)

// plan chooses the seed on what this healer can do: a stored snapshot only
// with a store it can open (seen: a plan config saying "store" with no
// OpenStore chose the store, and the seed step called a nil func), the
// flags and the pod move's key from this config whatever Config.Plan says.
func TestTheSeedChoiceIsOnWhatTheHealerCanDo(t *testing.T) {
	j := journal.Record{Request: "auto", StoreKey: "etcd-agent/c1/pod.db", BackupSeeds: true, SnapshotPath: "/q/b.db", SnapshotSHA256: "ab", SnapshotClusterID: 0xc1}
	h := &Healer{cfg: Config{RejoinMode: RejoinSeed, StoreSeed: &StoreSeed{Key: j.StoreKey}, Plan: plan.Config{SnapshotStore: true, StoreOpens: true}}, log: zap.NewNop()}
	if got := plan.ChooseSeed(j, h.planConfig()); got != plan.SeedBackup {
		t.Fatalf("no store to open: seed %s, want backup", got)
	}
	h.cfg.OpenStore = openNoStore
	if got := plan.ChooseSeed(j, h.planConfig()); got != plan.SeedStore {
		t.Fatalf("a store and the claim's key: seed %s, want store", got)
	}
	h.cfg.NoStoreSeed, h.cfg.NoBackupSeed = true, true
	if got := plan.ChooseSeed(j, h.planConfig()); got != plan.SeedFollower {
		t.Fatalf("--seed-from-store=false --seed-from-backup=false: seed %s, want follower", got)
	}
	h.cfg.RejoinMode = RejoinRaft
	if got := plan.ChooseSeed(j, h.planConfig()); got != plan.SeedRaft {
		t.Fatalf("raft mode: seed %s, want raft", got)
	}
}

func openNoStore(context.Context) (*snapshotstore.Store, error) {
	return nil, errors.New("not opened in this test")
}
