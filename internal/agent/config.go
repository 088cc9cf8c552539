// Package agent wires the daemon together: it resolves the local member's
// identity, runs the watchdog, and reports each observation as metrics,
// logs and a status file. Decisions and actions hang off the same loop.
package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/controller/manifestkeeper"
	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/labels"
)

// Config is everything `etcd-agent run` and `status` are told.
type Config struct {
	NodeName          string
	StaticPodManifest string
	// Overrides of what the manifest says; empty means "from the manifest".
	MemberName string
	DataDir    string
	// WALDir: the dedicated --wal-dir on this node.
	WALDir string
	// DataDirVolumeRoot: the data dir is a PV's path (a pod member).
	DataDirVolumeRoot bool
	// NodePaths are the node dirs mounted into the agent's container at
	// their own paths (its hostPath volumes): a member's data dir or WAL
	// dir outside them is not the node's (visibleOnNode). Empty: the agent
	// sees the node's filesystem (the lab; a host process).
	NodePaths []string
	// WALDirMountRoot: a volume is mounted right at the WAL dir in etcd's
	// container (a pod member).
	WALDirMountRoot bool
	// EnableV2: the member's pod turns on etcd 3.5's v2 API (a pod member;
	// a static pod's manifest says it in ResolveIdentity).
	EnableV2  bool
	ClientURL string
	PeerURLs  []string
	// Endpoints are other members' client URLs, to reach the cluster while
	// the local member is down.
	Endpoints    []string
	CACert       string
	Cert         string
	Key          string
	PollInterval time.Duration
	GracePeriod  time.Duration
	MetricsAddr  string
	// Profiling serves Go's /debug/pprof/ on MetricsAddr (--profiling).
	Profiling bool
	StateDir  string
	// Kubeconfig for the Lease, Node annotations and Events ("" = in-cluster).
	Kubeconfig string
	// Namespace holds the recovery Lease.
	Namespace string
	LeaseTTL  time.Duration

	// Healing.
	AutoHeal            bool
	DryRun              bool
	MaxLearnerLag       uint64
	LearnerStallTimeout time.Duration
	RecoveryTimeout     time.Duration
	// StopTimeout bounds the wait for etcd to stop (0: 3m).
	StopTimeout time.Duration
	// ManifestRestoreDelay is how long a static pod's manifest must stay
	// gone (not parked by the agent) before its checkpoint is put back
	// (0: never).
	ManifestRestoreDelay time.Duration
	RetryBackoff         time.Duration
	MaxRetryBackoff      time.Duration
	QuarantineDir        string
	QuarantineKeep       int
	// QuarantinePruneAfter: see heal.Config.QuarantinePruneAfter.
	QuarantinePruneAfter time.Duration
	// SnapshotStore is the snapshot store's URL (file:// or s3://; ""
	// none); SnapshotStoreKeep how many snapshots per cluster it keeps;
	// SnapshotStoreBackups: every pre-change backup is uploaded to it.
	SnapshotStore string
	// SeedFromStore: a move's learner is seeded from the move's stored
	// snapshot (else from a follower's stream).
	SeedFromStore bool
	// SeedFromBackup: a rejoin's learner is seeded from a copy of the
	// recovery's pre-change backup (one stream of the db, not two).
	SeedFromBackup bool
	// SeedCopyDuringStream: the backup's stream also writes the seed's
	// copy (moved in after the add), instead of a copy made after the add.
	SeedCopyDuringStream bool
	SnapshotStoreKeep    int
	SnapshotStoreBackups bool
	// RejoinMode is "seed" (the flag's default) or "raft" (heal.RejoinSeed/RejoinRaft).
	RejoinMode string
	// MemberRuntime is "static-pod" or "exec" (with StopCommand/StartCommand);
	// members from pods always use the pod runtime.
	MemberRuntime string
	// MemberSource is "static-pod" (the default: one member, from
	// StaticPodManifest) or "pods" (every etcd pod bound to NodeName that
	// matches PodSelector, each with its own state dir under
	// StateDir/members; docs/design.md §11).
	MemberSource string
	PodSelector  string
	// KubeletPodsDir is where the kubelet mounts pods' volumes (CSI PVs).
	KubeletPodsDir string
	// NodeLostGrace: a pod member's node must be NotReady with its node
	// Lease unrenewed this long before another node's agent frees the
	// member's place (UC1, the steward).
	NodeLostGrace time.Duration
	StopCommand   string
	StartCommand  string
	Log           *zap.Logger

	// podRuntime is a pod member's runtime (set per member by runPods).
	podRuntime memberruntime.Runtime
	// podImage is a pod member's etcd image, as its pod shows it now.
	podImage func() string
	// memberTLS, when set, is the pod member's client TLS (podClientTLS),
	// in place of --cacert/--cert/--key.
	memberTLS *tls.Config
	// probeSlots bounds how many members are probed at once (runPods).
	probeSlots chan struct{}
	// claims frees a pod member's claim for its move; storeSeed is the
	// stored snapshot a move named on its PV (set per member by runPods).
	claims    heal.ClaimMover
	storeSeed *heal.StoreSeed
	// backups uploads pre-change backups (Run, with a snapshot store).
	backups heal.BackupSink
	// ProbeWorkers: with --member-source=pods, how many members may be
	// observed at once (each observation probes every member of its
	// cluster); the rest wait their turn.
	ProbeWorkers int
	// PeerProbeInterval: with --member-source=pods, how long routine polls
	// of a healthy cluster may reuse its last full probe while every
	// member's liveness stream stays open (0: every poll probes every
	// member).
	PeerProbeInterval time.Duration
}

// Member sources (--member-source).
const (
	MemberSourceStaticPod = "static-pod"
	MemberSourcePods      = "pods"
)

// leaseTTLMargin: see the --lease-ttl check in Validate.
const leaseTTLMargin = 5 * time.Second

// Validate rejects flag values that cannot work, before anything runs.
func (c Config) Validate() error {
	var errs []error
	if c.PollInterval <= 0 {
		errs = append(errs, fmt.Errorf("--poll-interval must be > 0, got %s", c.PollInterval))
	}
	if c.ManifestRestoreDelay < 0 {
		errs = append(errs, fmt.Errorf("--manifest-restore-delay must be >= 0, got %s", c.ManifestRestoreDelay))
	}
	if c.GracePeriod < 0 {
		errs = append(errs, fmt.Errorf("--grace-period must be >= 0, got %s", c.GracePeriod))
	}
	if (c.Cert == "") != (c.Key == "") {
		errs = append(errs, errors.New("--cert and --key go together"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("--state-dir is required"))
	}
	switch c.MemberSource {
	case "", MemberSourceStaticPod:
	case MemberSourcePods:
		if c.NodeName == "" {
			errs = append(errs, errors.New("--member-source=pods needs --node-name (the pods bound to this node are its members)"))
		}
		if _, err := labels.Parse(c.PodSelector); err != nil {
			errs = append(errs, fmt.Errorf("--pod-selector: %w", err))
		}
		if c.PeerProbeInterval < 0 {
			errs = append(errs, fmt.Errorf("--peer-probe-interval must be >= 0, got %s", c.PeerProbeInterval))
		}
	default:
		errs = append(errs, fmt.Errorf("--member-source must be %s or %s, got %q", MemberSourceStaticPod, MemberSourcePods, c.MemberSource))
	}
	switch c.MemberRuntime {
	case "static-pod", "":
	case "exec":
		if c.StopCommand == "" || c.StartCommand == "" {
			errs = append(errs, errors.New("--member-runtime=exec needs --stop-command and --start-command"))
		}
	default:
		errs = append(errs, fmt.Errorf("--member-runtime must be static-pod or exec, got %q", c.MemberRuntime))
	}
	switch c.RejoinMode {
	case "", "raft", "seed":
	default:
		errs = append(errs, fmt.Errorf("--rejoin-mode must be raft or seed, got %q", c.RejoinMode))
	}
	// A fence renews when less than the step's timeout is left; right after
	// a renewal the Lease has its TTL minus the write's round trip, which
	// must still exceed the step: leaseTTLMargin covers a slow API.
	if minTTL := heal.MaxStepTimeout + leaseTTLMargin; c.LeaseTTL != 0 && c.LeaseTTL < minTTL {
		errs = append(errs, fmt.Errorf("--lease-ttl must be at least %s (the longest step, %s, plus %s for the renewal's round trip), so that each step is fenced for its whole timeout; got %s",
			minTTL, heal.MaxStepTimeout, leaseTTLMargin, c.LeaseTTL))
	}
	if c.QuarantinePruneAfter < 0 {
		errs = append(errs, fmt.Errorf("--quarantine-prune-after must be >= 0, got %s", c.QuarantinePruneAfter))
	}
	if c.QuarantineKeep < 1 {
		errs = append(errs, fmt.Errorf("--quarantine-keep must be >= 1, got %d", c.QuarantineKeep))
	}
	if c.SnapshotStore != "" && !strings.HasPrefix(c.SnapshotStore, "file:///") && !strings.HasPrefix(c.SnapshotStore, "s3://") {
		errs = append(errs, fmt.Errorf("--snapshot-store %q: want file:///dir or s3://bucket?...", snapshotstore.Redact(c.SnapshotStore)))
	}
	if c.SnapshotStore != "" && c.SnapshotStoreKeep < 1 {
		errs = append(errs, fmt.Errorf("--snapshot-store-keep must be >= 1, got %d", c.SnapshotStoreKeep))
	}
	return errors.Join(errs...)
}

// ResolveIdentity reads the member's identity from the static-pod manifest,
// then applies the overrides. With every override given, no manifest is
// needed. The data dir is mapped to its host path through the pod's mounts.
func ResolveIdentity(c Config) (watchdog.Identity, error) {
	id := watchdog.Identity{Name: c.MemberName, DataDir: c.DataDir, WALDir: c.WALDir, ClientURL: c.ClientURL, PeerURLs: c.PeerURLs}
	if id.Name != "" && id.DataDir != "" && id.ClientURL != "" && len(id.PeerURLs) > 0 {
		// The WAL dir still comes from the manifest when it says one: a
		// member/wal looked for in a data dir without one reads as corrupt.
		m, err := manifest.LoadMember(c.StaticPodManifest)
		if err != nil {
			return id, nil
		}
		id.DataDirMountRoot = dataDirMountRoot(m, id.DataDir)
		id.EnableV2 = m.EnableV2
		return withWALDir(id, m, c.StaticPodManifest)
	}
	m, err := manifest.LoadMember(c.StaticPodManifest)
	if errors.Is(err, fs.ErrNotExist) && c.StateDir != "" && c.MemberRuntime != "exec" {
		// The static-pod runtime parks the manifest to stop etcd: an agent
		// restarted mid-recovery (killed, evicted, upgraded) must still
		// know its member to resume, so it reads the parked copy.
		if pm, perr := manifest.LoadMember(c.parkedManifest()); perr == nil {
			m, err = pm, nil
		} else if cm, cerr := manifest.LoadMember(c.checkpointedManifest()); cerr == nil && c.ManifestRestoreDelay > 0 && !c.movedAway(cm.Name) {
			// A manifest that vanished (by accident) while the agent was
			// away: the member is known by its checkpoint, which the
			// agent may put back (manifestKeeper).
			m, err = cm, nil
		}
	}
	if err != nil {
		return id, fmt.Errorf("member identity: %w (or give --member-name, --data-dir, --client-url and --peer-urls)", err)
	}
	if id.Name == "" {
		id.Name = m.Name
	}
	if id.DataDir == "" {
		host, ok := m.HostPath(m.DataDir)
		if !ok {
			return id, fmt.Errorf("member identity: the data dir %s of %s is not on a hostPath mount; give --data-dir", m.DataDir, c.StaticPodManifest)
		}
		id.DataDir = host
	}
	id.DataDirMountRoot = dataDirMountRoot(m, id.DataDir)
	id.EnableV2 = m.EnableV2
	if id, err = withWALDir(id, m, c.StaticPodManifest); err != nil {
		return id, err
	}
	if id.ClientURL == "" && len(m.ClientURLs) > 0 {
		id.ClientURL = m.ClientURLs[0]
	}
	if len(id.PeerURLs) == 0 {
		id.PeerURLs = m.PeerURLs
	}
	if len(id.PeerURLs) == 0 || id.ClientURL == "" {
		return id, fmt.Errorf("member identity: %s has no --initial-advertise-peer-urls or --advertise-client-urls", c.StaticPodManifest)
	}
	return id, nil
}

// parkDir is where the static-pod runtime parks the etcd manifest while
// the member is stopped; parkedManifest is the parked copy.
func (c Config) parkDir() string { return filepath.Join(c.StateDir, "parked") }

// movedAway: member's journal is a move's tombstone (its checkpoint may
// outlive the move when the agent died between the set-aside and forget).
func (c Config) movedAway(member string) bool {
	j, ok, err := journal.Load(c.StateDir, member)
	return err != nil || ok && plan.MovedAway(j)
}

// manifestMissing: a static pod's manifest is neither live nor parked.
func (c Config) manifestMissing() bool {
	if c.MemberRuntime == "exec" || c.StaticPodManifest == "" || c.MemberSource == MemberSourcePods {
		return false
	}
	live, err1 := fsutil.Exists(c.StaticPodManifest)
	parked, err2 := fsutil.Exists(c.parkedManifest())
	return err1 == nil && err2 == nil && !live && !parked
}

// checkpointedManifest is the manifest keeper's checkpoint of the manifest.
func (c Config) checkpointedManifest() string {
	return manifestkeeper.CheckpointCopy(c.StateDir, c.StaticPodManifest)
}

// newManifestKeeper is the member's manifest keeper (nil: no static-pod
// manifest to keep).
func (c Config) newManifestKeeper(member string, m *metrics.Metrics, rep *nodereport.Reporter, log *zap.Logger) *manifestkeeper.Keeper {
	if c.MemberRuntime == "exec" || c.StaticPodManifest == "" || c.MemberSource == MemberSourcePods {
		return nil
	}
	return manifestkeeper.New(manifestkeeper.Config{Manifest: c.StaticPodManifest, Parked: c.parkedManifest(), StateDir: c.StateDir,
		Delay: c.ManifestRestoreDelay, DryRun: c.DryRun, AutoHeal: c.AutoHeal}, member, m, rep, log)
}

func (c Config) parkedManifest() string {
	return filepath.Join(c.parkDir(), filepath.Base(c.StaticPodManifest))
}

// TLSConfig builds the etcd client TLS config from --cacert/--cert/--key
// (nil when none is given: plain HTTP, as in the lab), or is a pod
// member's own (memberTLS).
func (c Config) TLSConfig() (*tls.Config, error) {
	if c.memberTLS != nil {
		return c.memberTLS, nil
	}
	if c.CACert == "" && c.Cert == "" {
		return nil, nil
	}
	info := transport.TLSInfo{TrustedCAFile: c.CACert, CertFile: c.Cert, KeyFile: c.Key}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd client TLS: %w", err)
	}
	return cfg, nil
}

// NewWatchdog builds the watchdog of member id (run, status and the gate
// all observe the same way). Learned endpoints persist in the state dir.
// pinned returns the member's pin (zero before it was seen serving):
// answers from any other cluster are ignored (rule 7), and its data dir
// behind the pin's high-water mark is stale (UC2).
func (c Config) NewWatchdog(id watchdog.Identity, pinned func() pin.Pin) (*watchdog.Watchdog, error) {
	t, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	cfg := watchdog.Config{Identity: id, Endpoints: c.Endpoints, TLS: t, PollInterval: c.PollInterval,
		GracePeriod: c.GracePeriod, Log: c.Log, Slots: c.probeSlots,
		PinnedClusterID: func() uint64 { return uint64(pinned().ClusterID) },
		PinnedHighWater: func() localdisk.HighWater { return pin.HighWaterOf(pinned()) }}
	if c.MemberSource == MemberSourcePods {
		cfg.PeerProbeEvery = c.PeerProbeInterval
	}
	if c.StateDir != "" {
		cfg.EndpointsFile = filepath.Join(c.StateDir, "endpoints.json")
	}
	return watchdog.New(cfg)
}

// statePin returns the pin in the state dir, read once: the view of a
// one-shot command (status).
func (c Config) statePin(member string) func() pin.Pin {
	p, _, _ := pin.Load(c.StateDir, member)
	return func() pin.Pin { return p }
}

// withWALDir sets the identity's WAL dir from the manifest's --wal-dir, on
// the node. Never guessed: a WAL dir looked for in the wrong place is
// missing, which reads as a wiped member (docs/recovery.md, "Supported
// layouts"). A volume mounted right at it is a mount point in etcd's
// container, where etcd cannot create a new member's WAL.
//
// The agent's --wal-dir (id.WALDir) must agree with the manifest's: one
// that differs, or names a WAL dir etcd does not run with, is an error (the
// heal would set aside one dir while the learner's etcd starts on the
// other). Only a manifest's WAL dir the agent cannot map takes the flag.
func withWALDir(id watchdog.Identity, m manifest.Member, manifestPath string) (watchdog.Identity, error) {
	flag := id.WALDir
	if m.WALDir == "" {
		if flag != "" {
			return id, fmt.Errorf("member identity: the agent's --wal-dir=%s, but etcd in %s runs with its WAL in the data dir (no --wal-dir, no ETCD_WAL_DIR); drop the agent's --wal-dir", flag, manifestPath)
		}
		return id, nil
	}
	host, ok := m.HostPath(m.WALDir)
	switch {
	case !ok && flag == "":
		return id, fmt.Errorf("member identity: the WAL dir %s (--wal-dir) of %s is not on a hostPath mount; give --wal-dir", m.WALDir, manifestPath)
	case !ok:
		return id, nil // the flag says where it is on the node
	case flag != "" && filepath.Clean(flag) != host:
		return id, fmt.Errorf("member identity: the agent's --wal-dir=%s differs from the WAL dir etcd runs with, %s (%s on the node, %s); drop the agent's --wal-dir or make them agree", flag, m.WALDir, host, manifestPath)
	}
	id.WALDir = host
	id.WALDirMountRoot = slices.ContainsFunc(m.HostMounts, func(hm manifest.HostMount) bool { return hm.ContainerPath == path.Clean(m.WALDir) })
	return id, nil
}

// dataDirMountRoot: the manifest mounts a hostPath right at etcd's
// --data-dir, which is the node's dataDir (kubeadm's layout): a removed
// data dir stays what etcd's container sees (watchdog.Identity).
func dataDirMountRoot(m manifest.Member, dataDir string) bool {
	host, ok := m.HostPath(m.DataDir)
	return ok && path.Clean(host) == path.Clean(dataDir) &&
		slices.ContainsFunc(m.HostMounts, func(hm manifest.HostMount) bool { return hm.ContainerPath == path.Clean(m.DataDir) })
}
