package heal

import (
	"context"
	"errors"
	"fmt"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
)

// Each destructive step's own timeout. The step's deadline is set before
// its fence, and the fence asks the Lease to outlive it (ConfirmFor), so no
// other agent can hold the Lease while the step may still land. Each must be
// shorter than the Lease's TTL (--lease-ttl, validated at start).
const (
	// stopTimeout bounds one stop of the member (park the manifest or run
	// the stop command, then wait until the process is gone). A slower stop
	// is retried on a fresh decision and a fresh fence (runtime.Stop is
	// idempotent).
	stopTimeout = 10 * time.Second
	// quarantineTimeout covers the rename of the data dir and its fsyncs.
	quarantineTimeout = 5 * time.Second
	// memberChangeTimeout bounds one MemberRemove, MemberAddAsLearner or
	// MemberPromote.
	memberChangeTimeout = 10 * time.Second
	// leaderHandOffTimeout bounds MoveLeader before the stop (not
	// destructive; the stop after it is fenced anew).
	leaderHandOffTimeout = 10 * time.Second
)

// MaxStepTimeout is the longest step timeout: the Lease's TTL must exceed
// it, or no step can be fenced.
const MaxStepTimeout = max(stopTimeout, quarantineTimeout, memberChangeTimeout)

// stopAndQuarantine stops the local member and renames its data dir into
// the quarantine (never deletes: rule 8). Both are fenced right before
// they happen: the hand-off can take its whole timeout, the stop too.
func (h *Healer) stopAndQuarantine(ctx context.Context, res memberstate.Result, j *journal.Record) error {
	if err := h.handOffLeadership(ctx, res, uint64(j.OldMemberID)); err != nil {
		// Not fatal: stopping a leader costs an election, not safety.
		h.log.Warn("leadership hand-off before the stop failed; the cluster will elect a new leader", zap.Error(err))
	}
	if err := h.stopFenced(ctx); err != nil {
		return err
	}
	if j.Request == plan.ActionMoveAway {
		// A pod move keeps the data dir in place on the old PV (Retain):
		// a move that fails before the removal puts the member back on it.
		return nil
	}
	walDst, err := h.quarantineWALDir(ctx)
	if err != nil {
		return err
	}
	if walDst != "" {
		j.WALQuarantinePath = walDst
		h.log.Info("dedicated WAL dir quarantined (kept, not deleted)", zap.String("from", h.cfg.WALDir), zap.String("to", walDst))
		// Journaled at once: the data dir's rename may fail or the agent
		// die before the step's own save; a repeated stop finds the WAL
		// dir gone and keeps this path.
		if err := journal.Save(h.cfg.StateDir, *j); err != nil {
			h.log.Warn("could not journal where the WAL dir went; it is journaled with the step", zap.String("to", walDst), zap.Error(err))
		}
	}
	dst, err := h.quarantineDataDir(ctx)
	if err != nil || dst == "" {
		return err
	}
	j.QuarantinePath = dst
	h.log.Info("data dir quarantined (kept, not deleted)", zap.String("from", h.cfg.DataDir), zap.String("to", dst))
	if over, err := localdisk.QuarantineOverflow(h.cfg.QuarantineDir, h.cfg.QuarantineKeep); err == nil && len(over) > 0 {
		h.log.Warn("quarantine holds more than --quarantine-keep entries; the older ones are pruned once the member has been healthy since they were made",
			zap.Int("keep", h.cfg.QuarantineKeep), zap.Strings("beyond", over))
	}
	return nil
}

// stopFenced stops the member in slices of h.stopSlice (stopTimeout), each
// fenced right before it: the first parks the manifest (or runs the stop
// command), the next ones only wait on (runtime.Stop is idempotent). A
// member slow to go keeps the Lease proven for every moment it may still be
// going down; the whole stop is bounded by ctx (the step's own deadline).
func (h *Healer) stopFenced(ctx context.Context) error {
	for {
		sctx, cancel := context.WithTimeout(ctx, h.stopSlice)
		err := h.fence(ctx, h.stopSlice)
		if err == nil {
			err = h.runtime.Stop(sctx)
			if err != nil {
				err = fmt.Errorf("stop member (%s): %w", h.runtime.Describe(), err)
			}
		}
		sliceOver := sctx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil || !sliceOver || !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		h.log.Info("member still stopping; fencing the Lease again and waiting on", zap.Duration("slice", h.stopSlice))
	}
}

// handOffLeadership moves leadership away from the local member before it is
// stopped. A leader that shuts down keeps its peers waiting for an election
// timeout (and longer while it drains), and every write and linearizable
// read stalls meanwhile: exactly the API disruption a heal must not cause.
func (h *Healer) handOffLeadership(ctx context.Context, res memberstate.Result, local uint64) error {
	o := res.Observation
	me, ok := o.Member(local)
	if !ok || !me.IsLeader || !me.Serving || len(me.ClientURLs) == 0 {
		return nil
	}
	var to observation.Member
	for _, m := range o.Members {
		if m.ID != local && !m.IsLearner && m.Serving && m.AppliedIndex >= to.AppliedIndex {
			to = m
		}
	}
	if to.ID == 0 {
		return errors.New("no serving follower to hand leadership to")
	}
	rctx, cancel := context.WithTimeout(ctx, leaderHandOffTimeout)
	defer cancel()
	start := time.Now()
	if err := h.cluster.MoveLeader(rctx, me.ClientURLs, to.ID); err != nil {
		return fmt.Errorf("move leader to %s: %w", to.Name, err)
	}
	h.log.Info("leadership handed off before stopping the member", zap.String("to", to.Name), zap.Duration("took", time.Since(start)),
		zap.String("cluster", fmt.Sprintf("%016x", o.ClusterID)))
	return nil
}

// snapshot streams the pre-change backup from the healthiest follower into
// the quarantine and verifies it, or takes the one streamed from that
// member while the member stopped (backupearly.go).
func (h *Healer) snapshot(ctx context.Context, res memberstate.Result, j *journal.Record, d plan.Decision) error {
	src, ok := res.Observation.Member(d.SourceID)
	if !ok || len(src.ClientURLs) == 0 {
		return fmt.Errorf("snapshot source %x (%s) is not in the member list with a client URL", d.SourceID, d.Detail)
	}
	why := d.Detail
	snap, early, err := h.takeEarlyBackup(ctx, j, src.ID)
	if !early {
		dest, nerr := h.noteBackupStream(j)
		if nerr != nil {
			return fmt.Errorf("journal where the backup streams: %w", nerr)
		}
		snap, err = h.streamBackup(ctx, src, *j, dest)
	}
	if err != nil {
		return fmt.Errorf("snapshot from %s: %w", src.Name, err)
	}
	j.SnapshotPath, j.SnapshotBytes, j.SnapshotSHA256, j.SnapshotSource = snap.Path, snap.Size, snap.SHA256, src.Name
	h.keepBackupCopy(*j, snap)
	j.SnapshotClusterID = journal.MemberID(res.Observation.ClusterID)
	// A rejoin's backup may seed its learner while this attempt does not
	// resume (backupSeeds); a move's seed is the store's.
	j.BackupSeeds = !plan.IsMove(*j)
	h.log.Info("snapshot streamed and verified", zap.String("source", src.Name), zap.String("why", why),
		zap.String("path", snap.Path), zap.Int64("bytes", snap.Size), zap.Duration("took", snap.Took))
	memberID := uint64(j.OldMemberID)
	if j.Request == plan.ActionMoveIn { // a move-in's snapshot is of the member it replaces
		memberID = uint64(j.MoveMemberID)
	}
	meta := snapshotstore.Meta{ClusterID: res.Observation.ClusterID, Member: h.cfg.Member, MemberID: memberID,
		Source: src.Name, TakenAt: time.Now().UTC(), SHA256: snap.SHA256, Size: snap.Size, EtcdVersion: src.Version}
	uploaded := func(r string) { h.metrics.SnapshotStoreUploads.WithLabelValues(h.cfg.Member, r).Inc() }
	if plan.IsMove(*j) {
		// A move's snapshot is in the store before anything changes (a
		// move-in's add, a move-away's removal).
		key, err := h.uploadNow(ctx, meta, snap.Path)
		if err != nil {
			uploaded(snapshotstore.Failed)
			return fmt.Errorf("the move's snapshot did not reach the snapshot store: %w", err)
		}
		uploaded(snapshotstore.Uploaded)
		j.StoreKey = key
		return nil
	}
	if h.cfg.Backups != nil {
		h.cfg.Backups.Enqueue(meta, snap.Path, uploaded)
	}
	return nil
}

// noteBackupStream picks a new backup's path in the quarantine and
// journals it in j before the stream starts: a killed agent's next start
// removes a file there the journal never took (removeUntakenBackup). The
// one j streamed before and never took (its record could not be saved)
// goes first: none of this attempt's streams writes it any more.
func (h *Healer) noteBackupStream(j *journal.Record) (string, error) {
	if err := os.MkdirAll(h.cfg.QuarantineDir, 0o700); err != nil {
		return "", err
	}
	h.removeUntaken(*j, "this attempt", "its record could not be saved; streamed anew")
	dest := filepath.Join(h.cfg.QuarantineDir, localdisk.SnapshotName(h.cfg.Member, time.Now()))
	// Never a path that is there: an older backup of that name (the same
	// second, a clock stepped back) is not this stream's to remove. The
	// stream itself refuses it too; the next try has the next second's.
	if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("the backup's name %s is taken (%v): streamed under the next one", dest, err)
	}
	j.BackupStreaming = dest
	return dest, journal.Save(h.cfg.StateDir, *j)
}

// streamBackup streams a snapshot of src into a new file in the quarantine
// and verifies it (peerseed.Stream).
func (h *Healer) streamBackup(ctx context.Context, src observation.Member, j journal.Record, dest string) (peerseed.Snapshot, error) {
	count, stop := h.meterStream(stepPreChangeStream, uint64(src.DBSize), h.metrics.SnapshotBytesTotal.WithLabelValues(h.cfg.Member))
	defer stop()
	return h.streamTo(ctx, src.ClientURLs[0], h.cfg.TLS, dest, plan.StreamBytesNeeded(src.DBSize), count, h.copyForSeed(j)...)
}

// uploadNow puts a verified snapshot in the store and returns its key.
func (h *Healer) uploadNow(ctx context.Context, m snapshotstore.Meta, path string) (string, error) {
	if h.cfg.OpenStore == nil {
		return "", errors.New("no --snapshot-store")
	}
	st, err := h.cfg.OpenStore(ctx)
	if err != nil {
		return "", err
	}
	defer st.Close()
	obj, err := st.Put(ctx, m, path)
	if err != nil {
		return "", err
	}
	h.log.Info("the move's snapshot is in the snapshot store", zap.String("store", st.String()), zap.String("key", obj.Key))
	return obj.Key, nil
}

// voterEndpoints are the client URLs of the serving voters of the
// observation: where a change or a check is sent.
func voterEndpoints(o observation.Observation) ([]string, error) {
	var eps []string
	for _, m := range o.Members {
		if m.Serving && !m.IsLearner && len(m.ClientURLs) > 0 {
			eps = append(eps, m.ClientURLs...)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("no serving voter to send the change to")
	}
	return eps, nil
}

// fence confirms, right before a destructive step, that we still hold the
// Lease (rule 5) and will for longer than need, the step's own timeout (a
// fresh read from the API; renewed first when less is left). The caller
// decided on a fresh member list and set the step's deadline before the
// fence. A failed fence wraps lease.ErrNotHeld: the recovery stops and
// re-decides (recover's lease-lost path).
func (h *Healer) fence(ctx context.Context, need time.Duration) error {
	if h.lease == nil {
		return errors.New("no Lease")
	}
	return h.lease.ConfirmFor(ctx, need)
}

// memberChange runs one membership change: fenced on the Lease, sent to
// the serving voters of the fresh observation, bounded in time.
func (h *Healer) memberChange(ctx context.Context, res memberstate.Result, change func(ctx context.Context, endpoints []string) error) error {
	eps, err := voterEndpoints(res.Observation)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, memberChangeTimeout)
	defer cancel()
	if err := h.fence(ctx, memberChangeTimeout); err != nil {
		return err
	}
	return change(rctx, eps)
}

func (h *Healer) removeMember(ctx context.Context, res memberstate.Result, id uint64) error {
	err := h.memberChange(ctx, res, func(ctx context.Context, eps []string) error {
		return h.cluster.MemberRemove(ctx, eps, id)
	})
	if errors.Is(err, rpctypes.ErrMemberNotFound) {
		h.log.Info("member already removed", zap.String("id", fmtID(id)))
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove member %s: %w", fmtID(id), err)
	}
	h.log.Info("member removed", zap.String("id", fmtID(id)))
	return nil
}

// addLearner adds our peer URLs as a learner. An add that times out may
// still be applied: the next observation then shows a learner with our peer
// URL, which Decide adopts instead of adding a second one.
func (h *Healer) addLearner(ctx context.Context, res memberstate.Result, j *journal.Record) error {
	var id uint64
	err := h.memberChange(ctx, res, func(ctx context.Context, eps []string) (err error) {
		id, err = h.cluster.MemberAddAsLearner(ctx, eps, j.PeerURLs)
		return err
	})
	if err != nil {
		return fmt.Errorf("add learner %v: %w", j.PeerURLs, err)
	}
	j.NewMemberID = journal.MemberID(id)
	h.log.Info("learner added", zap.String("id", fmtID(id)), zap.Strings("peerURLs", j.PeerURLs))
	return nil
}

// prepareDataDir readies the learner's data dir; anything left in it is
// quarantined first. Raft mode: no data dir; the leader sends the learner a
// raft snapshot (upstream-supported). Seed mode: the data dir is built from
// a snapshot streamed after the add (seedDataDir); on any seeding error it
// falls back to raft mode and journals why.
func (h *Healer) prepareDataDir(ctx context.Context, res memberstate.Result, j *journal.Record, seed plan.SeedSource) error {
	if dst, err := h.quarantineWALDir(ctx); err != nil {
		return fmt.Errorf("leftover WAL dir: %w", err)
	} else if dst != "" {
		h.log.Info("leftover WAL dir quarantined", zap.String("to", dst))
	}
	at, err := h.dataDirAt()
	if err != nil {
		return err
	}
	kept := at.VolumeRoot || at.Symlink // only its member/ is set aside
	if entries, err := os.ReadDir(h.cfg.DataDir); err == nil && len(entries) > 0 && (!kept || localdisk.HasMemberDir(h.cfg.DataDir)) {
		dst, err := h.quarantineDataDir(ctx)
		if err != nil {
			return fmt.Errorf("leftover data dir: %w", err)
		}
		if dst != "" {
			h.log.Info("leftover data dir quarantined", zap.String("to", dst))
		}
	}
	j.RejoinMode, j.SeedFallback, j.SeedDetail, j.SeedIndex, j.SeedTerm, j.SeedSource = RejoinRaft, "", "", 0, 0, ""
	if seed == "" { // a decision made without plan's choice: ask plan
		seed = plan.ChooseSeed(*j, h.planConfig())
	}
	if seed != plan.SeedRaft {
		err := h.seedDataDir(ctx, res, j, seed)
		if err == nil {
			j.RejoinMode = RejoinSeed
			return nil // BuildDataDir synced the data dir and its parent
		}
		// The backup's copy and any stream go now: the leader's raft
		// snapshot needs their room (plan.AttemptBytesNeeded counts one).
		h.removeSeedStreams()
		h.backupCopy = backupCopy{}
		j.SeedFallback, j.SeedDetail = peerseed.SeedReason(err), err.Error()
		if errors.Is(err, plan.ErrSeedUnsupportedVersion) {
			j.SeedFallback = "seed-unsupported-version"
		}
		h.metrics.SeedFallbacksTotal.WithLabelValues(h.cfg.Member, j.SeedFallback).Inc()
		h.log.Warn("seeding the learner's data dir failed; falling back to raft mode (empty data dir, the leader sends a snapshot)",
			zap.String("reason", j.SeedFallback), zap.Error(err))
		if h.reporter != nil {
			h.reporter.Eventf("Warning", nodereport.ReasonSeedFallback, "seed mode fell back to raft mode (%s): %v", j.SeedFallback, err)
		}
	}
	// Left absent: etcd creates it with the layout and modes it wants.
	return fsutil.SyncDir(filepath.Dir(h.cfg.DataDir))
}

// seedDataDir, seed mode: streams a snapshot from a follower once it has
// applied the learner's add (so the snapshot's membership has the learner)
// and builds the learner's data dir from it (peerseed.BuildDataDir): the
// learner then restarts at the snapshot's index and catches up from the
// leader's log instead of receiving a raft snapshot. The streamed file is
// moved into the data dir (peerseed.MoveDB: no second write of the whole
// db) and whatever is left of it removed afterwards; the pre-change backup
// (step 3) stays in the quarantine. On error no data dir is left.
func (h *Healer) seedDataDir(ctx context.Context, res memberstate.Result, j *journal.Record, seed plan.SeedSource) error {
	if h.cfg.WALDir != "" {
		return fmt.Errorf("%w (%s)", peerseed.ErrSeedDedicatedWALDir, h.cfg.WALDir)
	}
	// Whatever the version: only etcd 3.5 has a v2 API (3.6 fails on
	// --enable-v2 and ignores ETCD_ENABLE_V2, so there a refusal costs a
	// raft-mode rejoin only), and its v2 data is in no v3 snapshot.
	if h.cfg.EnableV2 {
		return fmt.Errorf("%w (member %s)", peerseed.ErrSeedV2StoreEnabled, h.cfg.Member)
	}
	if err := plan.SeedSupported(h.learnerVersion(), res.Observation); err != nil {
		return err
	}
	if j.NewMemberID == 0 || res.Observation.ClusterID == 0 {
		return fmt.Errorf("learner ID (%x) or cluster ID (%x) unknown", uint64(j.NewMemberID), res.Observation.ClusterID)
	}
	// BuildDataDir never replaces a data dir: an empty one is dropped (a
	// non-empty one was quarantined). A volume's root or a symlink never
	// is: raft mode.
	switch at, err := h.dataDirAt(); {
	case err != nil || at.VolumeRoot:
		return fmt.Errorf("%w (%s): %v", peerseed.ErrSeedVolumeRoot, h.cfg.DataDir, err)
	case at.Symlink:
		return fmt.Errorf("%w (%s)", peerseed.ErrSeedDataDirSymlink, h.cfg.DataDir)
	}
	if err := os.Remove(h.cfg.DataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the empty data dir %s: %w", h.cfg.DataDir, err)
	}
	if err := os.MkdirAll(h.cfg.QuarantineDir, 0o700); err != nil {
		return err
	}
	if h.seedPredatingTheAdd(ctx, res, j, seed) {
		return nil
	}
	src, why, err := plan.PickSource(res.Observation, uint64(j.OldMemberID))
	if err != nil {
		return err
	}
	// Seed streams are transient copies (the pre-change backup is kept
	// apart): remove what an agent killed mid-seed left, then our own.
	h.removeSeedStreams()
	dest := h.seedStreamPath()
	defer h.removeSeedStreams()
	count, stop := h.meterStream(stepSeedStream, uint64(src.DBSize), h.metrics.SnapshotBytesTotal.WithLabelValues(h.cfg.Member))
	snap, ss, err := peerseed.StreamForSeed(ctx, src.ClientURLs[0], h.cfg.TLS, dest, plan.StreamBytesNeeded(src.DBSize), count)
	stop()
	if err != nil {
		return fmt.Errorf("seed snapshot from %s: %w", src.Name, err)
	}
	if err := h.holdAt(ctx, HoldSeedStreamed); err != nil {
		return err
	}
	opts := append(seedVersionOptions(h.learnerVersion(), res.Observation), peerseed.MoveDB(), peerseed.BeforeRename(func(string) error { return h.holdAt(ctx, HoldSeedRename) }))
	info, err := h.buildSeed(dest, uint64(j.NewMemberID), res.Observation.ClusterID, opts...)
	if err != nil {
		return err
	}
	j.SeedIndex, j.SeedTerm, j.SeedSource = info.ConsistentIndex, info.Term, src.Name
	h.log.Info("learner data dir seeded from a snapshot", zap.String("source", src.Name), zap.String("why", why),
		zap.Int64("bytes", snap.Size), zap.Uint64("leaderIndex", ss.LeaderIndex), zap.Uint64("consistentIndex", info.ConsistentIndex),
		zap.Uint64("term", info.Term), zap.Duration("streamTook", snap.Took), zap.Duration("buildTook", info.Took))
	return nil
}

// seedStreamPrefix names this member's seed streams in the quarantine:
// <prefix><time>.db, with its .part and provenance record beside it.
func (h *Healer) seedStreamPrefix() string { return "seed-" + h.cfg.Member + "-" }

// seedStampLayout is the time in a seed stream's name (UTC, fixed width).
const seedStampLayout = "2006-01-02T15-04-05.000Z"

// removeSeedStreams removes this member's seed streams from the quarantine:
// exactly <prefix><seedStampLayout>.db and what sits beside it (.part, the
// provenance record). Member "etcd" never takes member "etcd-2"'s
// ("seed-etcd-2-2026-..." has no stamp right after "seed-etcd-").
func (h *Healer) removeSeedStreams() {
	// A backup's provenance record (seedFromBackup) that a killed agent
	// left: snapshot-<member>-<stamp>.db.seed.json and its temp files.
	records, _ := filepath.Glob(filepath.Join(h.cfg.QuarantineDir, "snapshot-"+h.cfg.Member+"-*.db.seed.json"))
	records2, _ := filepath.Glob(filepath.Join(h.cfg.QuarantineDir, ".snapshot-"+h.cfg.Member+"-*.db.seed.json.tmp-*"))
	for _, p := range append(records, records2...) {
		if isBackupRecordOf(strings.TrimPrefix(filepath.Base(p), "."), h.cfg.Member) {
			_ = os.Remove(p)
		}
	}
	paths, _ := filepath.Glob(filepath.Join(h.cfg.QuarantineDir, h.seedStreamPrefix()+"*"))
	// A store fetch's temp file: .<prefix><stamp>.db.<random>.part.
	parts, _ := filepath.Glob(filepath.Join(h.cfg.QuarantineDir, "."+h.seedStreamPrefix()+"*.part"))
	for _, p := range append(paths, parts...) {
		if !isSeedStreamOf(strings.TrimPrefix(filepath.Base(p), "."), h.seedStreamPrefix()) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			h.log.Warn("could not remove a seed snapshot", zap.String("path", p), zap.Error(err))
		}
	}
}

// isBackupRecordOf: name is snapshot-<member>-<stamp>.db.seed.json (a
// backup's provenance record), optionally followed by a temp suffix.
func isBackupRecordOf(name, member string) bool {
	_, rest, ok := localdisk.CutSnapshotName(name, member)
	return ok && strings.HasPrefix(rest, ".seed.json")
}

// isSeedStreamOf: name is <prefix><stamp>.db, optionally followed by a
// further extension (.part, .seed.json).
func isSeedStreamOf(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || len(rest) < len(seedStampLayout) {
		return false
	}
	if _, err := time.Parse(seedStampLayout, rest[:len(seedStampLayout)]); err != nil {
		return false
	}
	ext := rest[len(seedStampLayout):]
	return ext == ".db" || strings.HasPrefix(ext, ".db.")
}

// startMember starts the local member with --initial-cluster = the current
// members + self, --initial-cluster-state=existing; with its client URLs
// set aside when d says so (plan.asideClientURLs).
func (h *Healer) startMember(ctx context.Context, res memberstate.Result, j *journal.Record, d plan.Decision) error {
	if err := h.holdAt(ctx, HoldMemberStart); err != nil {
		return err
	}
	if j.NewMemberID != 0 {
		if err := h.waitLearnerKnown(ctx, res, j); err != nil {
			return err
		}
	}
	ic := h.initialCluster(res.Observation, j)
	if s, ok := h.runtime.(memberruntime.ClientURLsSetter); ok && d.AsideClientURLs {
		private, err := s.StartAside(ctx, ic)
		if err == nil {
			j.ClientURLsAside = private
			h.log.Info("member started as learner, its client URLs set aside until its promotion: no client reaches it meanwhile",
				zap.String("initialCluster", ic), zap.String("listensOn", private))
			return nil
		}
		// Not a reason to leave the member out: started as it is, a client
		// that lists it may see a write refused until its promotion.
		h.log.Warn("cannot set the learner's client URLs aside; starting it on its own (a 3.5 learner refuses client writes until its promotion)", zap.Error(err))
	}
	if err := h.runtime.Start(ctx, ic); err != nil {
		return fmt.Errorf("start member (%s): %w", h.runtime.Describe(), err)
	}
	h.log.Info("member started as learner", zap.String("initialCluster", ic))
	return nil
}

// startLearner starts the member and then starts the learner-stall clock:
// the stall timeout measures a running learner that makes no progress, not
// how long its start took (the journal saved with the phase carries it).
func (h *Healer) startLearner(ctx context.Context, res memberstate.Result, j *journal.Record, d plan.Decision) error {
	if err := h.startMember(ctx, res, j, d); err != nil {
		return err
	}
	j.LearnerProgressAt = h.now().UTC()
	return nil
}

// initialCluster is --initial-cluster for a start: the current members
// plus self (under our name and the journal's peer URLs).
func (h *Healer) initialCluster(o observation.Observation, j *journal.Record) string {
	parts := []string{}
	for _, u := range j.PeerURLs {
		parts = append(parts, h.cfg.Member+"="+u)
	}
	for _, m := range initialPeers(o, j) {
		for _, u := range m.PeerURLs {
			parts = append(parts, m.Name+"="+u)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// initialPeers are the members --initial-cluster names besides ourselves
// (self is listed under our name and the journal's peer URLs): the ones a
// starting etcd without a WAL asks for the member list.
func initialPeers(o observation.Observation, j *journal.Record) []observation.Member {
	var peers []observation.Member
	for _, m := range o.Members {
		if m.Name == "" || m.ID == uint64(j.OldMemberID) || m.ID == uint64(j.NewMemberID) || observation.Overlaps(m.PeerURLs, j.PeerURLs) {
			continue
		}
		peers = append(peers, m)
	}
	return peers
}

// promote promotes the learner; ErrLearnerNotReady just means "not yet".
func (h *Healer) promote(ctx context.Context, res memberstate.Result, j *journal.Record, id uint64) error {
	start := time.Now()
	err := h.memberChange(ctx, res, func(ctx context.Context, eps []string) error {
		return h.cluster.MemberPromote(ctx, eps, id)
	})
	if err != nil {
		if errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			h.log.Info("learner not ready to promote yet", zap.String("id", fmtID(id)))
			return nil
		}
		return fmt.Errorf("promote %s: %w", fmtID(id), err)
	}
	h.metrics.LearnerLag.WithLabelValues(h.cfg.Member).Set(0)
	h.metrics.PhaseDuration.WithLabelValues(h.cfg.Member, string(journal.PhasePromoted)).Observe(time.Since(start).Seconds())
	h.log.Info("learner promoted", zap.String("id", fmtID(id)))
	return h.advance(ctx, j, journal.PhasePromoted)
}
