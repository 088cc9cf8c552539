// Package heal is the executor of the decision core: it carries out one
// plan.Decision at a time (stop, quarantine, snapshot, remove, add learner,
// prepare, start, promote, verify), writing each step to the journal before
// and after, holding the recovery Lease and confirming it before every
// membership change, and reporting each step as metrics, Events and the
// Node's last-recovery annotation. Whether a step is safe is never decided
// here: plan.Decide decides, on a fresh observation, before every step.
package heal

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
	"path/filepath"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
)

// Lease is the recovery Lease as the executor uses it (package lease).
type Lease interface {
	TryAcquire(ctx context.Context, info lease.Info) error
	SetPhase(ctx context.Context, phase string) error
	// ConfirmFor is the fence before a destructive step of up to need.
	ConfirmFor(ctx context.Context, need time.Duration) error
	Release(ctx context.Context) error
	Holding() bool
	Current(ctx context.Context) (holder string, info lease.Info, expired bool, err error)
}

// Reporter tells people on the Node (package nodereport); nil without an API.
type Reporter interface {
	Eventf(eventType, reason, format string, args ...any)
	SetLastRecovery(ctx context.Context, lr nodereport.LastRecovery) error
	ClearRequest(ctx context.Context) error
}

// Observer makes a fresh observation (package watchdog).
type Observer interface {
	Observe(ctx context.Context, now time.Time) memberstate.Result
}

// Config configures the Healer.
type Config struct {
	Member   string
	Node     string
	PeerURLs []string
	DataDir  string
	// WALDir is the dedicated --wal-dir on the node ("" when the WAL is in
	// the data dir): set aside with the data dir (WALDirDisposal).
	WALDir string
	// DataDirVolumeRoot: the data dir is a PV's path (a pod member's claim
	// mounted at etcd's --data-dir): never renamed, like a mount point.
	DataDirVolumeRoot bool
	// WALDirMountRoot: a volume is mounted right at the WAL dir in etcd's
	// container: a mount point there, whatever the host shows.
	WALDirMountRoot bool
	// EnableV2: the member runs etcd 3.5's v2 API (manifest.Member.EnableV2),
	// whose data no v3 snapshot carries: never seeded (v2-store-enabled).
	EnableV2 bool
	StateDir string
	// QuarantineDir holds replaced data dirs and the pre-change snapshots;
	// it must be on the data dir's filesystem (renames, never copies).
	QuarantineDir  string
	QuarantineKeep int
	// QuarantinePruneAfter is how long the member must have been healthy
	// before copies beyond QuarantineKeep are pruned (Housekeep); default
	// 10 minutes.
	QuarantinePruneAfter time.Duration
	// RejoinMode is how the learner's data dir is prepared: RejoinSeed
	// (the agent's default: built from a snapshot streamed after the add;
	// any seeding error falls back to raft mode and is journaled) or
	// RejoinRaft (left absent, the leader sends a raft snapshot; also what
	// an empty value means).
	RejoinMode      string
	Plan            plan.Config
	RecoveryTimeout time.Duration
	// StepInterval is the pause between observations while waiting.
	StepInterval time.Duration
	// StepTimeouts override a step's own deadline (stepTimeout); the e2e
	// and unit tests shorten them.
	StepTimeouts map[plan.Action]time.Duration
	// ProgressEvery is how often a step or a wait that lasts says so
	// (default 10s); PollInterval how often the agent observes while a
	// step runs, so metrics and Node reporting go on (default 5s).
	ProgressEvery time.Duration
	PollInterval  time.Duration
	// Progress is where the long steps (the streams, the catch-up) say how
	// far they are, for the status file and the Node (nil: a board of its
	// own, for its logs and metrics only).
	Progress *progress.Board
	TLS      *tls.Config
	Log      *zap.Logger
	// Cluster is the etcd API (nil: clientv3 with TLS); Now the clock
	// (nil: time.Now). Unit tests inject fakes.
	Cluster Cluster
	Now     func() time.Time
	// Backups, when set (--snapshot-store), is handed every verified
	// pre-change backup to upload in the background; the heal never waits
	// on it.
	Backups BackupSink
	// OpenStore, when set (--snapshot-store), opens the snapshot store for
	// a step that must wait on it (a move's snapshot goes there before
	// anything changes). The caller closes what it returns.
	OpenStore func(ctx context.Context) (*snapshotstore.Store, error)
	// NoStoreSeed: a move's learner is seeded from a follower's stream, not
	// from the move's stored snapshot (--seed-from-store=false).
	NoStoreSeed bool
	// NoBackupSeed: a rejoin's learner is seeded from a second stream off
	// a follower after the add, not from a copy of the recovery's own
	// pre-change backup (--seed-from-backup=false).
	NoBackupSeed bool
	// NoCopyDuringStream: the seed's copy of the backup is made after the
	// add, not written during the backup's stream (--seed-copy-during-stream=false).
	NoCopyDuringStream bool
	// PinnedAnywhere, when set, tells whether any node's record names the
	// member (nodereport.MemberPinnedAnywhere); nil: never asked, and a
	// member not in the list is healed as before.
	PinnedAnywhere func(ctx context.Context, clusterID uint64) (bool, error)
	// MoveSourceGone, when set, says whether a move-in's source (its
	// move-from value) still asks for it: "" yes, else why not; an error
	// when it cannot be read (nil: never asked).
	MoveSourceGone func(ctx context.Context, from string) (string, error)
	// LearnerVersion, when set, is the etcd version the member runs once
	// started again: its manifest's or pod's image tag ("" unknown).
	LearnerVersion func() string
	// Claims, for a pod member, reads and frees its claim for a move
	// (plan.ActionMoveAway); nil: no pod moves.
	Claims ClaimMover
	// StoreSeed, for a pod member whose PV a move reserved, is the stored
	// snapshot its learner is seeded from (nil: none).
	StoreSeed *StoreSeed
}

// BackupSink takes a verified snapshot to keep in the snapshot store
// (snapshotstore.Uploader); it must not block.
type BackupSink interface {
	Enqueue(m snapshotstore.Meta, path string, result func(string)) bool
}

// Rejoin modes (Config.RejoinMode).
const (
	RejoinRaft = "raft"
	RejoinSeed = "seed"
)

// Healer runs recoveries for the local member.
type Healer struct {
	cfg      Config
	cluster  Cluster
	now      func() time.Time
	obs      Observer
	newLease func(clusterID uint64) (Lease, error)
	runtime  memberruntime.Runtime
	reporter Reporter
	metrics  *metrics.Metrics
	lease    Lease
	leaseFor uint64
	log      *zap.Logger
	// lastRefusal is the reason last counted (refusals count once per
	// change of reason); blockedReason the one RefusedSince shows.
	lastRefusal   plan.Reason
	blockedReason plan.Reason
	// clearPending: clearing an answered request's trigger failed; retried
	// on every Consider, and meanwhile a request is that answered one.
	clearPending bool
	// leaseFreeSince: since when every look at the Lease found it free or
	// expired (plan.Input.LeaseFreeSince); zero after a look that did not.
	leaseFreeSince time.Time
	// never is neverAMember's last answer, taken at neverAt.
	never   bool
	neverAt time.Time
	// dryRunPruneSaid: a dry-run agent said once what it would prune.
	dryRunPruneSaid bool
	// mountPoint tells whether a path is a mount point (localdisk.IsMountPoint).
	mountPoint func(string) (bool, error)
	// stopSlice is how long one fenced slice of the stop lasts (stopTimeout).
	stopSlice time.Duration
	// earlyDropWait bounds the wait for a cancelled early stream to end.
	earlyDropWait time.Duration
	// holdPoints and crashPhases are the e2e suite's hooks (testhooks.go;
	// none in a release build; unit tests set their own).
	holdPoints, crashPhases func() []string
	// healthySince starts the member's current healthy run as the idle
	// loop saw it (zero when not healthy); lastPruneErr is the last pruning
	// failure logged (Housekeep).
	healthySince time.Time
	lastPruneErr string
	// unreadLeasePolls counts the polls in a row on which the open journal
	// waited for a Lease it could not read, its member parked
	// (putBackAfterUnreadLeases).
	unreadLeasePolls int
	// takeUnanswered: the last attempt's take of the Lease went
	// unanswered (api-unavailable) or was not made (an earlier hold's
	// stream lingers: recovery-in-progress); the polls deciding Begin keep
	// that refusal (said once, blocked since then) until a take succeeds.
	takeUnanswered bool
	// killedStreamsRemoved: removeKilledStreams ran (once per process).
	killedStreamsRemoved bool
	// streamTo streams a verified snapshot into a file (peerseed.Stream;
	// a fake in unit tests); early is the pre-change backup streaming
	// while the member stops (backupearly.go).
	streamTo func(ctx context.Context, endpoint string, tlsCfg *tls.Config, dest string, need uint64, progress func(int64), opts ...peerseed.StreamOption) (peerseed.Snapshot, error)
	early    *earlyBackup
	// backupCopy is the copy of the pre-change backup written beside it
	// for the seed (backupcopy.go).
	backupCopy backupCopy
	meters     meters // the long steps' progress (progress.go)
}

// New returns a Healer. newLease builds the Lease of a cluster (nil when
// there is no Kubernetes API: then every recovery is refused api-unavailable).
func New(cfg Config, obs Observer, newLease func(uint64) (Lease, error), rt memberruntime.Runtime, rep Reporter, m *metrics.Metrics) *Healer {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.StepInterval <= 0 {
		cfg.StepInterval = 500 * time.Millisecond
	}
	if cfg.Progress == nil {
		cfg.Progress = &progress.Board{}
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Second
	}
	if cfg.RecoveryTimeout <= 0 {
		cfg.RecoveryTimeout = 30 * time.Minute
	}
	if cfg.QuarantinePruneAfter <= 0 {
		cfg.QuarantinePruneAfter = 10 * time.Minute
	}
	if cfg.QuarantineDir == "" {
		cfg.QuarantineDir = filepath.Join(filepath.Dir(cfg.DataDir), "etcd-agent-quarantine")
		if cfg.DataDirVolumeRoot {
			// Beside it would be off the volume (another PV's folder).
			cfg.QuarantineDir = filepath.Join(cfg.DataDir, localdisk.VolumeQuarantineDirName)
		}
	}
	h := &Healer{cfg: cfg, cluster: cfg.Cluster, now: cfg.Now, obs: obs, newLease: newLease, runtime: rt, reporter: rep, metrics: m,
		log: cfg.Log.With(zap.String("member", cfg.Member))}
	if h.cluster == nil {
		h.cluster = etcdCluster{cfg: &h.cfg}
	}
	if h.now == nil {
		h.now = time.Now
	}
	h.mountPoint, h.stopSlice, h.streamTo, h.earlyDropWait = localdisk.IsMountPoint, stopTimeout, peerseed.Stream, 30*time.Second
	h.holdPoints, h.crashPhases = testHoldPoints, testCrashPhases
	return h
}

// Outcome is how a Consider call ended.
type Outcome struct {
	Decision plan.Decision
	// Result is "" when nothing was attempted, else succeeded|failed|refused.
	Result string
	Err    error
	// Answered: the manual request was answered already (by a recovery
	// whose trigger could not be cleared then); nothing more to say.
	Answered bool
	// Retired: a move-out succeeded; the local member is gone from this
	// node (its manifest set aside) and the agent stops acting for it.
	Retired bool
}

// Consider decides on one observation; when a recovery may begin (or an
// open one resumes) it runs it to its end before returning. req is a
// manual request (nil for the automatic path). A stranded learner rolled
// back first is not the answer: the heal it blocked (and a manual request)
// is considered again at once, on a fresh observation.
func (h *Healer) Consider(ctx context.Context, res memberstate.Result, req *plan.Request) Outcome {
	if res.Observation.PeersReused {
		// A routine poll took the other members from an older probe
		// (observation.PeersReused): the healer decides on every member
		// probed now. (The agent observes afresh before it calls; this
		// holds for any caller.)
		res = h.obs.Observe(ctx, h.now())
	}
	h.seen(res.Verdict)
	h.removeKilledStreams()
	out := h.consider(ctx, res, req)
	if out.Result == journal.ResultSucceeded && out.Decision.RolledBackLearner() && ctx.Err() == nil {
		return h.consider(ctx, h.obs.Observe(ctx, h.now()), req)
	}
	return out
}

func (h *Healer) consider(ctx context.Context, res memberstate.Result, req *plan.Request) Outcome {
	j, _, err := journal.Load(h.cfg.StateDir, h.cfg.Member)
	if err != nil {
		return Outcome{Err: err}
	}
	if h.clearPending || j.RequestClearPending {
		h.clearRequest(ctx)
		j.RequestClearPending = h.clearPending // what persistClearPending wrote
		if req != nil {
			// The trigger the agent hands in is the one a recovery
			// answered or runs for (its clear failed): never execute it
			// twice. An open recovery resumes as itself.
			h.log.Info("manual request already answered by a recovery (its trigger could not be cleared); not executed again")
			if !j.Active() {
				return Outcome{Decision: plan.Decision{Action: plan.Nothing, Detail: "request answered by the last recovery"}, Answered: true}
			}
			req = nil
		}
	}
	d := h.decide(ctx, res, req, j)
	if d.MovedAway() {
		// A move-out closed but its manifest was not set aside (the agent
		// died in between, or the set-aside failed): do it now.
		return Outcome{Decision: d, Retired: h.retireParked(&j)}
	}
	// An open journal waiting on an unreadable Lease is the same outage
	// as a take that goes unanswered: one refusal, one refused_since.
	waitsForAPI := d.WaitsForAPI()
	if !d.Begins() && !waitsForAPI {
		h.takeUnanswered = false
	}
	if !h.takeUnanswered { // else still refused until a take is answered
		h.blocked(d)
		if d.Action != plan.Refuse && !waitsForAPI {
			h.lastRefusal = ""
		}
	}
	if d.WaitsForMoveTarget() {
		// Bounded (plan.Config.MoveDeadline) and said at every poll: what
		// it waits for, and how much of the deadline is left.
		h.log.Info("pod move: waiting for its member on the target", zap.String("id", j.ID), zap.String("detail", d.Detail))
	}
	if out, ended := h.putBackAfterUnreadLeases(ctx, &j, d, res); ended {
		return out
	}
	switch {
	case d.Begins(), j.Active() && d.Action != plan.Nothing && d.Action != plan.Refuse:
		// An open journal with the Lease held (a step decided) is
		// executed too, never left deciding a step on every poll.
		return h.recover(ctx, res, req, j)
	case d.Action == plan.Refuse:
		h.refused(ctx, req, d)
		return Outcome{Decision: d, Result: journal.ResultRefused}
	}
	return Outcome{Decision: d}
}

// blocked keeps RefusedSince: the time since which the agent has been
// refused with d's reason (lease-held-by-other also while a journal of
// ours waits for the Lease).
func (h *Healer) blocked(d plan.Decision) {
	r := d.BlockedOn()
	if r == h.blockedReason || h.metrics == nil {
		return
	}
	if h.blockedReason != "" {
		h.metrics.RefusedSince.WithLabelValues(h.cfg.Member, string(h.blockedReason)).Set(0)
	}
	if r != "" {
		h.metrics.RefusedSince.WithLabelValues(h.cfg.Member, string(r)).Set(float64(h.now().Unix()))
	}
	h.blockedReason = r
}

// clearRequest removes the manual trigger from the Node; a failure is
// retried on the next Consider (clearPending).
func (h *Healer) clearRequest(ctx context.Context) {
	if h.reporter == nil {
		return
	}
	err := h.reporter.ClearRequest(ctx)
	if err != nil {
		h.log.Warn("clearing the manual recovery request failed; retrying at the next poll", zap.Error(err))
	}
	h.clearPending = err != nil
	h.persistClearPending()
}

// persistClearPending keeps clearPending in the journal (open or closed),
// so that a restarted agent knows the trigger still on the Node was
// answered, or is being answered by the open recovery. A caller holding the
// open record in memory sets RequestClearPending on it too.
func (h *Healer) persistClearPending() {
	j, _, err := journal.Load(h.cfg.StateDir, h.cfg.Member)
	if err != nil || j.ID == "" || j.RequestClearPending == h.clearPending {
		return
	}
	j.RequestClearPending = h.clearPending
	if err := journal.Save(h.cfg.StateDir, j); err != nil {
		h.log.Warn("recording that the manual request's trigger is still to be cleared", zap.Error(err))
	}
}

// countRefusal counts a refusal once per change of reason (a refusal that
// lasts is one, not one per poll); it says whether it counted.
func (h *Healer) countRefusal(r plan.Reason) bool {
	if r == h.lastRefusal {
		return false
	}
	h.lastRefusal = r
	h.metrics.RefusalsTotal.WithLabelValues(h.cfg.Member, string(r)).Inc()
	return true
}

// Plan returns what Decide says now, without acting (status, dry runs).
func (h *Healer) Plan(ctx context.Context, res memberstate.Result, req *plan.Request) plan.Decision {
	j, _, err := journal.Load(h.cfg.StateDir, h.cfg.Member)
	if err != nil {
		return plan.Decision{Action: plan.Nothing, Detail: err.Error()}
	}
	return h.decide(ctx, res, req, j)
}

// decide asks the core, and asks the API for the Lease only when the answer
// depends on it: most polls (a healthy member, a member in its grace, a
// refusal for quorum) need no API call, and with the majority lost the API
// cannot answer anyway.
func (h *Healer) decide(ctx context.Context, res memberstate.Result, req *plan.Request, j journal.Record) plan.Decision {
	if !j.Active() {
		in := h.baseInput(res, req, j)
		in.NeverAMember = h.neverAMember(ctx, res.Observation)
		h.claimFacts(ctx, &in, req, j)
		h.moveSource(ctx, &in, req, j)
		in.APIAvailable = true // optimistic; checked below if it matters
		in.LeaseFreeSince = time.Unix(0, 0)
		d := plan.Decide(in, h.planConfig())
		if !d.Begins() && !(d.Action == plan.Refuse && d.DryRun()) {
			return d
		}
	}
	return plan.Decide(h.input(ctx, res, req, j), h.planConfig())
}

// neverAMember: the local member is not in the list, nothing is pinned
// here, and no node's record names it (asked at most every
// neverAMemberRecheck). An unanswered question counts as "never": the
// member waits rather than grow the cluster on a guess.
func (h *Healer) neverAMember(ctx context.Context, o observation.Observation) bool {
	if h.cfg.PinnedAnywhere == nil || o.Local.Match != observation.MatchNotFound || o.ClusterPinned || o.MemberListError != "" {
		return false
	}
	if !h.neverAt.IsZero() && h.now().Sub(h.neverAt) < neverAMemberRecheck {
		return h.never
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	seen, err := h.cfg.PinnedAnywhere(cctx, o.ClusterID)
	if err != nil {
		h.log.Debug("could not read the nodes' records of the member; it waits as never a member", zap.Error(err))
		seen = false // asked again after neverAMemberRecheck, not at every poll
	}
	h.never, h.neverAt = !seen, h.now()
	return h.never
}

// neverAMemberRecheck spaces the Node list behind neverAMember.
const neverAMemberRecheck = 30 * time.Second

// input gathers what Decide needs besides the observation: the Lease's
// state (asked of the API server) and the free disk space.
func (h *Healer) input(ctx context.Context, res memberstate.Result, req *plan.Request, j journal.Record) plan.Input {
	in := h.baseInput(res, req, j)
	in.BackupStreamingFrom = h.backupStreamingFrom(j)
	if !j.Active() {
		in.NeverAMember = h.neverAMember(ctx, res.Observation)
	}
	h.claimFacts(ctx, &in, req, j)
	h.moveSource(ctx, &in, req, j)
	l, err := h.leaseOf(res.Observation.ClusterID)
	if err != nil || l == nil {
		h.leaseFreeSince = time.Time{} // no look: a break in "free at every look"
		return in
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	holder, _, expired, err := l.Current(cctx)
	if err != nil && !errors.Is(err, lease.ErrNotHeld) {
		h.leaseFreeSince = time.Time{} // not seen: a break in "free at every look"
		return in
	}
	in.APIAvailable = true
	in.LeaseHeld = l.Holding()
	if holder != "" && !expired && !in.LeaseHeld && holder != h.holder() {
		in.LeaseHolder = holder
	}
	switch free := holder == "" || expired; {
	case !free:
		h.leaseFreeSince = time.Time{}
	case h.leaseFreeSince.IsZero():
		h.leaseFreeSince = in.Now
	}
	in.LeaseFreeSince = h.leaseFreeSince
	return in
}

// baseInput is the input without the Lease's state (API not asked).
func (h *Healer) baseInput(res memberstate.Result, req *plan.Request, j journal.Record) plan.Input {
	in := plan.Input{Now: res.Observation.At, Obs: res.Observation, Verdict: res.Verdict, Request: req, Journal: j,
		Learners: res.Learners}
	sp := localdisk.SpaceFor(h.cfg.DataDir, h.cfg.QuarantineDir)
	in.FreeBytes, in.DataDirFreeBytes, in.DataDirOtherFS = sp.QuarantineFree, sp.DataDirFree, sp.DataDirOtherFS
	h.layoutInput(&in)
	in.LearnerVersion = h.learnerVersion()
	in.Backups = localdisk.BackupsHint(h.cfg.QuarantineDir)
	if h.runtime != nil { // nil: a healer that only plans (dry runs, status)
		_, err := h.runtime.Stopped()
		in.ManifestMissing = errors.Is(err, memberruntime.ErrNoManifest)
	}
	h.clientURLsInput(&in)
	return in
}

// learnerVersion is Config.LearnerVersion's answer ("" without one).
func (h *Healer) learnerVersion() string {
	if h.cfg.LearnerVersion == nil {
		return ""
	}
	return h.cfg.LearnerVersion()
}

func (h *Healer) holder() string { return h.cfg.Node + "/" + h.cfg.Member }

// leaseOf returns the Lease of the cluster (one per cluster ID), never
// another one while the current one is held.
func (h *Healer) leaseOf(clusterID uint64) (Lease, error) {
	if h.newLease == nil {
		return nil, errors.New("no Kubernetes API configured")
	}
	if clusterID == 0 {
		return nil, errors.New("cluster ID unknown")
	}
	if h.lease != nil && h.leaseFor == clusterID {
		return h.lease, nil
	}
	if h.lease != nil && h.lease.Holding() {
		// Swapping would forget a held Lease (never released) and fence
		// against another cluster's: refuse until it is released.
		return nil, fmt.Errorf("the recovery Lease of cluster %x is held; not switching to cluster %x", h.leaseFor, clusterID)
	}
	l, err := h.newLease(clusterID)
	if err != nil {
		return nil, err
	}
	h.lease, h.leaseFor = l, clusterID
	return l, nil
}

// refused reports a refusal: metric, Event and log once per change of
// reason, and for a manual request (always answered) the last-recovery
// annotation (and the trigger is cleared: it was handled).
func (h *Healer) refused(ctx context.Context, req *plan.Request, d plan.Decision) {
	if req != nil {
		h.lastRefusal = "" // every request is answered and counted
	}
	if !h.countRefusal(d.Reason) {
		return
	}
	h.log.Warn("recovery refused", zap.String("reason", string(d.Reason)), zap.String("detail", d.Detail))
	if h.reporter == nil {
		return
	}
	h.reporter.Eventf("Warning", nodereport.ReasonRecoveryRefused, "%s: %s", d.Reason, d.Detail)
	if req != nil {
		h.clearRequest(ctx) // the healer's own: a failed clear is remembered (clearPending)
		lr := nodereport.Refusal(requestName(req), string(d.Reason), d.Detail, h.now())
		lr.MoveFrom = req.MoveFrom // a move's source matches the answer to its ask
		_ = nodereport.WriteLastRecovery(ctx, h.reporter, h.log, lr)
	}
}

func requestName(req *plan.Request) string {
	if req == nil {
		return "auto"
	}
	if req.DryRun {
		return req.Action + " (dry-run)"
	}
	return req.Action
}

func fmtID(id uint64) string { return fmt.Sprintf("%x", id) }
