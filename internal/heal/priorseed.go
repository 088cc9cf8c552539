package heal

// Seeds that predate the learner's add: a move's snapshot in the store,
// taken under the Lease moments before its change. The learner is written
// into the copy's membership, the member removed since taken out of it, and
// the copy is taken only when its membership is then a fresh member list's
// (peerseed.WithLearner, WithoutMember, ExpectMembership); the leader sends
// the log from the copy's index on. Any refusal falls back to a follower's
// stream.
//
// Not a data dir that went back in time (UC2): its copy may be of any age
// and even of another incarnation of the cluster with the same IDs, and a
// membership change undone since (a learner added and removed) cannot be
// seen in the member list but crashes the seeded learner when it replays it
// (etcd's UpdateAttributes panics on a member it never had): such a copy
// stays a quarantined copy.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// storeSeed is a stored snapshot a learner may be seeded from: a move-in's
// own (taken before its add), or a pod move's (taken before the moved
// member's removal, named on the PV the move reserved: removed is then
// that member).
type storeSeed struct {
	key, sha256 string
	size        int64
	clusterID   uint64 // 0: the observation's
	removed     uint64
}

// storedSeed is the stored snapshot plan chose to seed this recovery's
// learner from (plan.SeedStore): a move-in's own, or the pod move's named
// by Config.StoreSeed when begin took it for this recovery (j.StoreKey: the
// first attempt on this claim only).
func (h *Healer) storedSeed(j *journal.Record) storeSeed {
	if j.Request == plan.ActionMoveIn {
		return storeSeed{key: j.StoreKey, sha256: j.SnapshotSHA256, size: j.SnapshotBytes}
	}
	s := h.cfg.StoreSeed
	if s == nil || s.Key != j.StoreKey { // (plan chose it from these: never)
		return storeSeed{key: j.StoreKey}
	}
	return storeSeed{key: s.Key, sha256: s.SHA256, size: s.Size, clusterID: s.ClusterID, removed: s.Removed}
}

// seedPredatingTheAdd seeds the learner from a move's stored snapshot or
// this attempt's backup, as plan chose (seed); false: the caller streams
// from a follower (the refusal said in a log line, an Event and the seed
// fallback metric).
func (h *Healer) seedPredatingTheAdd(ctx context.Context, res memberstate.Result, j *journal.Record, seed plan.SeedSource) bool {
	fallback := func(what string, err error) {
		h.metrics.SeedFallbacksTotal.WithLabelValues(h.cfg.Member, peerseed.SeedReason(err)).Inc()
		h.log.Warn("seeding from "+what+" failed; streaming a seed from a follower instead", zap.Error(err))
		h.event("Warning", nodereport.ReasonSeedFallback, "seeding from %s failed (%s): %v; streaming from a follower", what, peerseed.SeedReason(err), err)
	}
	switch seed {
	case plan.SeedStore:
		stored := h.storedSeed(j)
		err := h.seedFromStore(ctx, res, j, stored)
		if err == nil {
			return true
		}
		fallback("the move's stored snapshot "+stored.key, err)
	case plan.SeedBackup:
		err := h.seedFromBackup(ctx, res, j)
		if err == nil {
			return true
		}
		fallback("the pre-change backup "+j.SnapshotPath, err)
	}
	return false
}

// backupSeeds: this recovery's own pre-change backup may seed its learner
// (plan.BackupMaySeed); while it may, a resume or another's learner turns
// that off.
func (h *Healer) backupSeeds(j *journal.Record) bool {
	return plan.BackupMaySeed(*j, h.planConfig())
}

// planConfig is the decision's config, with what plan's seed choice looks
// at taken from this config's (one truth; tests change it after New).
func (h *Healer) planConfig() plan.Config {
	c := h.cfg.Plan
	c.RejoinSeed = h.cfg.RejoinMode == RejoinSeed
	c.StoreOpens = h.cfg.OpenStore != nil
	c.NoStoreSeed, c.NoBackupSeed, c.StoreSeedKey = h.cfg.NoStoreSeed, h.cfg.NoBackupSeed, ""
	if h.cfg.StoreSeed != nil {
		c.StoreSeedKey = h.cfg.StoreSeed.Key
	}
	return c
}

// seedFromBackup builds the learner's data dir from a copy of this
// recovery's pre-change backup (step 3; the backup itself stays as it was,
// kept with the quarantine): the db is streamed once, not a second time
// after the add. The backup was taken under the Lease right before the
// removal, so its membership is the cluster's then; the old member is taken
// out of the copy, the learner written in, and the copy is taken only when
// that is exactly a fresh member list (buildPredating), as for a move's
// stored snapshot. The copy is checked against the sha256 journaled when
// the backup was streamed.
func (h *Healer) seedFromBackup(ctx context.Context, res memberstate.Result, j *journal.Record) error {
	// A positive check beside the journal's flag: the Lease is ours now,
	// read fresh. Only our own acquire (begin, which clears BackupSeeds on a
	// resume) puts our name back on a Lease another agent held, so holding
	// it now means nobody else did since the backup, also for a process
	// frozen past the Lease's TTL in the middle of a step.
	if err := h.fence(ctx, 0); err != nil {
		return fmt.Errorf("the recovery Lease, read fresh: %w (the backup may predate another agent's changes)", err)
	}
	st, err := os.Stat(j.SnapshotPath)
	if err != nil {
		return fmt.Errorf("%w: the pre-change backup: %w", peerseed.ErrSeedCorruptDB, err)
	}
	if st.Size() != j.SnapshotBytes {
		return fmt.Errorf("%w: the pre-change backup %s has %d bytes, %d were streamed", peerseed.ErrSeedCorruptDB, j.SnapshotPath, st.Size(), j.SnapshotBytes)
	}
	source := "backup:" + j.SnapshotSource
	// The copy written during the stream is moved in (a rename); else the
	// backup is copied. Either is hashed against the stream's sha256.
	db, move := j.SnapshotPath, false
	if c := h.backupCopyOf(*j); c != "" {
		db, move = c, true
	}
	if err := peerseed.WriteSeedSource(db, peerseed.SeedSource{ClusterID: uint64(j.SnapshotClusterID), Endpoint: source,
		Size: j.SnapshotBytes, SHA256: j.SnapshotSHA256, StreamedAt: st.ModTime().UTC()}); err != nil {
		return err
	}
	defer h.removeSeedStreams() // the record, the copy if not moved, and anything a killed attempt left
	if err := h.holdAt(ctx, HoldSeedStreamed); err != nil {
		return err
	}
	return h.buildPredating(ctx, res, j, db, source, uint64(j.OldMemberID), 0, move)
}

// seedFromStore builds the learner's data dir from a snapshot a move put in
// the store before its change (fetched and verified against its sha256).
func (h *Healer) seedFromStore(ctx context.Context, res memberstate.Result, j *journal.Record, seed storeSeed) error {
	if seed.clusterID != 0 && seed.clusterID != res.Observation.ClusterID {
		return fmt.Errorf("%w: the move's snapshot %s is of cluster %x", peerseed.ErrSeedForeignCluster, seed.key, seed.clusterID)
	}
	if free, err := localdisk.FreeBytes(h.cfg.QuarantineDir); err == nil && free < plan.StreamBytesNeeded(seed.size) {
		return fmt.Errorf("%w: %s has %d bytes free, the stored snapshot needs %d", peerseed.ErrDiskFull, h.cfg.QuarantineDir, free, plan.StreamBytesNeeded(seed.size))
	}
	st, err := h.cfg.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	h.removeSeedStreams()
	dest := h.seedStreamPath()
	defer h.removeSeedStreams()
	t0 := time.Now()
	m, err := st.Get(ctx, seed.key, dest)
	if err != nil {
		return err
	}
	if m.ClusterID != res.Observation.ClusterID {
		return fmt.Errorf("%w: stored snapshot %s is of cluster %x", peerseed.ErrSeedForeignCluster, seed.key, m.ClusterID)
	}
	if m.SHA256 != seed.sha256 || m.Size != seed.size {
		// Not the snapshot the move took and uploaded (replaced since).
		return fmt.Errorf("%w: stored snapshot %s is %d bytes, sha256 %s; the move's is %d bytes, sha256 %s",
			peerseed.ErrSeedCorruptDB, seed.key, m.Size, m.SHA256, seed.size, seed.sha256)
	}
	if err := peerseed.WriteSeedSource(dest, peerseed.SeedSource{ClusterID: m.ClusterID, Endpoint: "store:" + seed.key,
		Size: m.Size, SHA256: m.SHA256, Version: m.EtcdVersion, StreamedAt: m.TakenAt}); err != nil {
		return err
	}
	return h.buildPredating(ctx, res, j, dest, "store:"+seed.key, seed.removed, time.Since(t0), true)
}

// buildPredating builds the data dir from dest, a db older than the add:
// its membership, the learner written in and removed taken out, must be
// exactly a fresh member list's (nothing else changed since). move: dest
// is a transient copy, moved into the data dir (else copied: kept as is).
func (h *Healer) buildPredating(ctx context.Context, res memberstate.Result, j *journal.Record, dest, source string, removed uint64, fetched time.Duration, move bool) error {
	fresh := h.obs.Observe(ctx, h.now()).Observation
	learner, ok := fresh.Member(uint64(j.NewMemberID))
	if !ok || !learner.IsLearner || fresh.MemberListError != "" {
		return fmt.Errorf("learner %x is not in a fresh member list (%s)", uint64(j.NewMemberID), fresh.MemberListError)
	}
	var expect []peerseed.ExpectedMember
	for _, m := range fresh.Members {
		expect = append(expect, peerseed.ExpectedMember{ID: m.ID, PeerURLs: m.PeerURLs, IsLearner: m.IsLearner})
	}
	opts := []peerseed.BuildOption{peerseed.WithoutMember(removed), peerseed.WithLearner(learner.PeerURLs), peerseed.ExpectMembership(expect),
		peerseed.BeforeRename(func(string) error { return h.holdAt(ctx, HoldSeedRename) })}
	if move {
		opts = append(opts, peerseed.MoveDB())
	}
	opts = append(opts, seedVersionOptions(h.learnerVersion(), res.Observation)...)
	info, err := h.buildSeed(dest, uint64(j.NewMemberID), res.Observation.ClusterID, opts...)
	if err != nil {
		return err
	}
	j.SeedIndex, j.SeedTerm, j.SeedSource = info.ConsistentIndex, info.Term, source
	h.log.Info("learner data dir seeded from a db older than its add", zap.String("source", source), zap.String("removedFromIt", fmtID(removed)),
		zap.Int64("bytes", info.DBBytes), zap.Bool("moved", move), zap.Bool("learnerWritten", info.LearnerWritten), zap.Uint64("consistentIndex", info.ConsistentIndex),
		zap.Uint64("term", info.Term), zap.Duration("fetchTook", fetched), zap.Duration("buildTook", info.Took))
	return nil
}

// seedStreamPath is a new seed stream's path in the quarantine.
func (h *Healer) seedStreamPath() string {
	return filepath.Join(h.cfg.QuarantineDir, fmt.Sprintf("%s%s.db", h.seedStreamPrefix(), time.Now().UTC().Format(seedStampLayout)))
}
