package plan

import (
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/record"
)

// The seed's source order, decided here and carried on the prepare step
// (and on the add, whose step prepares right away).
func TestChooseSeedTakesTheFirstSourceThatMayBeUsed(t *testing.T) {
	backup := record.Record{Request: "auto", BackupSeeds: true, SnapshotPath: "/q/backup.db", SnapshotSHA256: "ab", SnapshotClusterID: 0xc1}
	moveIn := record.Record{Request: ActionMoveIn, StoreKey: "etcd-agent/c1/move.db", BackupSeeds: true, SnapshotPath: "/q/b.db", SnapshotSHA256: "ab", SnapshotClusterID: 0xc1}
	podMoved := backup
	podMoved.StoreKey = "etcd-agent/c1/pod.db"
	seed := Config{RejoinSeed: true, StoreOpens: true, StoreSeedKey: "etcd-agent/c1/pod.db"}
	with := func(f func(*Config)) Config { c := seed; f(&c); return c }
	for _, c := range []struct {
		name string
		j    record.Record
		cfg  Config
		want SeedSource
	}{
		{"raft mode", backup, with(func(c *Config) { c.RejoinSeed = false }), SeedRaft},
		{"a rejoin's own backup", backup, seed, SeedBackup},
		{"--seed-from-backup=false", backup, with(func(c *Config) { c.NoBackupSeed = true }), SeedFollower},
		{"a resumed attempt's backup", record.Record{Request: "auto", SnapshotPath: "/q/b.db", SnapshotSHA256: "ab", SnapshotClusterID: 0xc1}, seed, SeedFollower},
		{"a backup without its hash", record.Record{Request: "auto", BackupSeeds: true, SnapshotPath: "/q/b.db", SnapshotClusterID: 0xc1}, seed, SeedFollower},
		{"a move-in's stored snapshot", moveIn, seed, SeedStore},
		{"a move-in never seeds from its own backup", moveIn, with(func(c *Config) { c.NoStoreSeed = true }), SeedFollower},
		{"a move-in without a store", moveIn, with(func(c *Config) { c.StoreOpens = false }), SeedFollower},
		{"the pod move's snapshot this claim names", podMoved, seed, SeedStore},
		{"a stored snapshot another claim names", podMoved, with(func(c *Config) { c.StoreSeedKey = "etcd-agent/c1/other.db" }), SeedBackup},
		{"the member moving away", record.Record{Request: ActionMoveAway, StoreKey: "etcd-agent/c1/pod.db"}, seed, SeedFollower},
	} {
		if got := ChooseSeed(c.j, c.cfg); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	if BackupWouldSeed(moveIn, seed) || !BackupWouldSeed(record.Record{Request: "auto"}, seed) || BackupWouldSeed(podMoved, seed) {
		t.Errorf("BackupWouldSeed: a copy beside the backup only for a rejoin that the store does not seed")
	}
}
