package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/controller/forcearm"
	"github.com/etcd-agent/etcd-agent/internal/controller/mover"
	"github.com/etcd-agent/etcd-agent/internal/etcdversion"
	"github.com/etcd-agent/etcd-agent/internal/gate"
	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"github.com/etcd-agent/etcd-agent/metrics"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeClient builds the Kubernetes client from --kubeconfig, else the
// in-cluster config; nil (and the reason) when neither is available: the
// agent then observes and reports, and refuses to act (api-unavailable).
// m, when not nil, counts the requests the API denies (countDenials).
func (c Config) KubeClient(m *metrics.Metrics) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if c.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg.Timeout = 10 * time.Second
	cfg.UserAgent = "etcd-agent"
	// client-go's default 5 QPS would queue a recovery's Lease renewals,
	// phase updates and Events behind each other (200 ms apiece).
	cfg.QPS, cfg.Burst = 50, 100
	countDenials(cfg, m, c.Log)
	return kubernetes.NewForConfig(cfg)
}

// PlanConfig is the decision core's configuration.
func (c Config) PlanConfig() plan.Config {
	return plan.Config{AutoHeal: c.AutoHeal, DryRun: c.DryRun, MaxLearnerLag: c.MaxLearnerLag, MoveDeadline: c.RecoveryTimeout,
		LearnerStallTimeout: c.LearnerStallTimeout, RetryBackoff: c.RetryBackoff, MaxRetryBackoff: c.MaxRetryBackoff,
		RejoinSeed: c.RejoinMode == heal.RejoinSeed, SnapshotStore: c.SnapshotStore != "", StoreOpens: c.SnapshotStore != "",
		NoStoreSeed: !c.SeedFromStore, NoBackupSeed: !c.SeedFromBackup, StoreSeedKey: c.storeSeedKey()}
}

// storeSeedKey is the stored snapshot a pod move named on this member's
// claim ("" none): plan's seed choice (the healer's config carries it too).
func (c Config) storeSeedKey() string {
	if c.storeSeed == nil {
		return ""
	}
	return c.storeSeed.Key
}

// Runtime builds the member runtime.
func (c Config) Runtime(id watchdog.Identity) (memberruntime.Runtime, error) {
	if c.podRuntime != nil {
		return c.podRuntime, nil
	}
	urls := append([]string{id.ClientURL}, id.PeerURLs...)
	if c.MemberRuntime == "exec" {
		return memberruntime.NewExec(c.StopCommand, c.StartCommand, urls, id.DataDir, c.Log, memberruntime.StopTimeout(c.StopTimeout)), nil
	}
	if c.StaticPodManifest == "" {
		return nil, errors.New("--member-runtime=static-pod needs --static-pod-manifest")
	}
	return memberruntime.NewStaticPod(c.StaticPodManifest, c.parkDir(), urls, c.Log, memberruntime.StopTimeout(c.StopTimeout)), nil
}

// newHealer wires the executor: kc may be nil (no API: no Lease).
// progressEvery is how often a long step says how far it is on the Node
// (and in the healer's log lines).
const progressEvery = 10 * time.Second

func (c Config) newHealer(id watchdog.Identity, obs heal.Observer, kc kubernetes.Interface, rep heal.Reporter, m *metrics.Metrics, board *progress.Board) (*heal.Healer, error) {
	rt, err := c.Runtime(id)
	if err != nil {
		return nil, err
	}
	t, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	var newLease func(uint64) (heal.Lease, error)
	if kc != nil {
		newLease = func(clusterID uint64) (heal.Lease, error) {
			return lease.New(lease.Config{Client: kc, Namespace: c.Namespace, Name: lease.Name(clusterID),
				Holder: c.NodeName + "/" + id.Name, TTL: c.LeaseTTL, Log: c.Log})
		}
	}
	return heal.New(heal.Config{Member: id.Name, Node: c.NodeName, PeerURLs: id.PeerURLs, DataDir: id.DataDir, WALDir: id.WALDir, DataDirVolumeRoot: c.DataDirVolumeRoot, WALDirMountRoot: id.WALDirMountRoot || c.WALDirMountRoot,
		EnableV2: id.EnableV2 || c.EnableV2,
		StateDir: c.StateDir, QuarantineDir: c.QuarantineDir, QuarantineKeep: c.QuarantineKeep, QuarantinePruneAfter: c.QuarantinePruneAfter, RejoinMode: c.RejoinMode, Plan: c.PlanConfig(),
		RecoveryTimeout: c.RecoveryTimeout, StepInterval: 250 * time.Millisecond, PollInterval: c.PollInterval, ProgressEvery: progressEvery, Progress: board,
		TLS: t, Log: c.Log, StepTimeouts: c.stepTimeouts(), Backups: c.backups, OpenStore: c.openStore(), NoStoreSeed: !c.SeedFromStore,
		NoBackupSeed: !c.SeedFromBackup, NoCopyDuringStream: !c.SeedCopyDuringStream,
		PinnedAnywhere: pinnedAnywhere(kc, id.Name, c.podRuntime == nil), Claims: c.claims, StoreSeed: c.storeSeed, MoveSourceGone: moveSourceFor(kc, c.NodeName),
		LearnerVersion: c.learnerVersion},
		obs, newLease, rt, rep, m), nil
}

// newForceArm wires the arm of a pod member's --force-new-cluster request
// (nil: a static member, or no API: its gate then uses no request).
func (c Config) newForceArm(id watchdog.Identity, kc kubernetes.Interface, log *zap.Logger) *forcearm.Arm {
	if c.podRuntime == nil || kc == nil {
		return nil
	}
	ttl := c.LeaseTTL
	if ttl == 0 {
		ttl = lease.DefaultTTL
	}
	holder := c.NodeName + "/" + id.Name + "/force-new-cluster"
	return forcearm.New(forcearm.Config{StateDir: c.StateDir, Member: id.Name, Holder: holder, ValidFor: min(ttl/2, plan.ForceArmValidFor), Log: log,
		NewLease: func(clusterID uint64) (forcearm.Lease, error) {
			return lease.New(lease.Config{Client: kc, Namespace: c.Namespace, Name: lease.Name(clusterID), Holder: holder, TTL: ttl, Log: c.Log})
		}})
}

// stepTimeouts: the stop step's deadline follows --stop-timeout (its wait
// for etcd to go) plus the leadership hand-off and the quarantine rename.
func (c Config) stepTimeouts() map[plan.Action]time.Duration {
	if c.StopTimeout <= 0 {
		return nil
	}
	return map[plan.Action]time.Duration{plan.StopMember: c.StopTimeout + 2*time.Minute}
}

// pinnedAnywhere asks the Nodes' records whether the member was ever seen
// (static pods; a pod member's record is its cluster's, nil here).
func pinnedAnywhere(kc kubernetes.Interface, member string, staticPod bool) func(ctx context.Context, clusterID uint64) (bool, error) {
	if kc == nil || !staticPod {
		return nil
	}
	return func(ctx context.Context, clusterID uint64) (bool, error) {
		return nodereport.MemberPinnedAnywhere(ctx, kc, member, clusterID)
	}
}

// moveSourceFor is Config.MoveSourceGone with an API (nil without).
func moveSourceFor(kc kubernetes.Interface, node string) func(ctx context.Context, from string) (string, error) {
	if kc == nil {
		return nil
	}
	return mover.SourceGone(kc, node)
}

// openStore opens the snapshot store for a step that waits on it (nil
// without --snapshot-store).
func (c Config) openStore() func(ctx context.Context) (*snapshotstore.Store, error) {
	if c.SnapshotStore == "" {
		return nil
	}
	return func(ctx context.Context) (*snapshotstore.Store, error) {
		return snapshotstore.Open(ctx, c.SnapshotStore)
	}
}

// startUploader runs the uploader of pre-change backups (--snapshot-store)
// until ctx ends: it opens the store in its own goroutine, so a store that
// is away or hung never holds up the agent. stop waits for it a bounded
// time.
func (c *Config) startUploader(ctx context.Context) (stop func()) {
	if !c.SnapshotStoreBackups {
		return func() {}
	}
	u := snapshotstore.NewUploader(c.SnapshotStore, c.SnapshotStoreKeep, c.Log)
	uctx, cancel := context.WithCancel(ctx)
	go u.Run(uctx)
	c.backups = u
	return func() {
		cancel()
		select {
		case <-u.Done():
		case <-time.After(10 * time.Second):
			c.Log.Warn("snapshot store: the uploader did not stop within 10s (a store call that ignores cancellation); leaving it")
		}
	}
}

// learnerVersion is the etcd version the member will run once started
// again: the tag of its pod's image, or of its static-pod manifest's
// (parked while the agent holds it stopped); "" when none names one
// (plan's version rule, docs/recovery.md "etcd versions").
func (c Config) learnerVersion() string {
	if c.podImage != nil {
		return etcdversion.FromImage(c.podImage())
	}
	if c.MemberRuntime == "exec" || c.StaticPodManifest == "" {
		// An exec runtime may read its identity from a manifest, but its
		// start command's etcd is not known to be that image's.
		return ""
	}
	for _, path := range []string{c.StaticPodManifest, c.parkedManifest()} {
		if m, err := manifest.LoadMember(path); err == nil {
			return etcdversion.FromImage(m.Image)
		}
	}
	return ""
}

// GateConfig is the start gate's configuration (package gate): the member
// overrides, the state dir, and this agent's ways to the cluster and the
// API, so that the gate observes exactly as the agent does.
func (c Config) GateConfig() gate.Config {
	return gate.Config{StateDir: c.StateDir, StaticPodManifest: c.StaticPodManifest,
		MemberName: c.MemberName, DataDir: c.DataDir, WALDir: c.WALDir, ClientURL: c.ClientURL, PeerURLs: c.PeerURLs,
		CACert: c.CACert, Cert: c.Cert, Key: c.Key, PodMember: c.MemberSource == MemberSourcePods,
		PollInterval: c.PollInterval, NodeName: c.NodeName, Kubeconfig: c.Kubeconfig, Log: c.Log,
		ResolveIdentity: func() (watchdog.Identity, error) { return ResolveIdentity(c) },
		NewWatchdog:     c.NewWatchdog,
		KubeClient:      func() (kubernetes.Interface, error) { return c.KubeClient(nil) },
	}
}
