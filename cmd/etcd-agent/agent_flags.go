package main

import (
	"os"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/spf13/pflag"
)

// addMemberFlags are the flags that say which member this agent looks after
// and how to reach the cluster; shared by run, status, recover and gate.
func addMemberFlags(fs *pflag.FlagSet, c *agent.Config) {
	fs.StringVar(&c.NodeName, "node-name", os.Getenv("NODE_NAME"), "this Kubernetes node's name (default $NODE_NAME)")
	fs.StringVar(&c.StaticPodManifest, "static-pod-manifest", "/etc/kubernetes/manifests/etcd.yaml", "the etcd static-pod manifest the member's identity is read from")
	fs.StringVar(&c.MemberName, "member-name", "", "override: the etcd member name")
	fs.StringVar(&c.DataDir, "data-dir", "", "override: the member's data dir on this node")
	fs.StringVar(&c.WALDir, "wal-dir", "", "override: the member's dedicated WAL dir (etcd's --wal-dir) on this node")
	fs.StringVar(&c.ClientURL, "client-url", "", "override: the member's client URL")
	fs.StringSliceVar(&c.PeerURLs, "peer-urls", nil, "override: the member's peer URLs")
	fs.StringSliceVar(&c.Endpoints, "endpoints", nil, "other members' client URLs, to reach the cluster while the local member is down (learned ones are added)")
	fs.StringVar(&c.CACert, "cacert", "", "CA bundle to verify etcd's serving certificates")
	fs.StringVar(&c.Cert, "cert", "", "client certificate for etcd (mTLS)")
	fs.StringVar(&c.Key, "key", "", "client key for etcd (mTLS)")
	fs.DurationVar(&c.PollInterval, "poll-interval", 5*time.Second, "how often to observe (data dir events trigger an observation at once)")
	fs.DurationVar(&c.GracePeriod, "grace-period", 60*time.Second, "how long a member must be continuously unhealthy before it is lost")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes API (default: in-cluster config)")
	fs.StringVar(&c.StateDir, "state-dir", "/var/lib/etcd-agent", "the agent's own state (journal, learned endpoints, status)")
	fs.StringSliceVar(&c.NodePaths, "node-paths", nil, "node dirs mounted into the agent's container at their own paths (its hostPath volumes); a member's data dir or WAL dir outside them is an error, never read as wiped (empty: the agent sees the node's filesystem)")
}

// addHealFlags are the flags of the recovery itself (run and recover).
func addHealFlags(fs *pflag.FlagSet, c *agent.Config) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "etcd-agent"
	}
	fs.StringVar(&c.Namespace, "namespace", ns, "namespace of the recovery Lease (default $POD_NAMESPACE or etcd-agent)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", 30*time.Second, "recovery Lease duration; renewed every third of it while held; must exceed the longest fenced step (10s)")
	fs.BoolVar(&c.AutoHeal, "auto-heal", true, "heal a lost member automatically (false: only on a manual request)")
	fs.BoolVar(&c.DryRun, "dry-run", false, "plan and report every recovery, change nothing")
	fs.Uint64Var(&c.MaxLearnerLag, "max-learner-lag", 1000, "promote the learner once its applied index is within this many entries of the leader's")
	fs.DurationVar(&c.LearnerStallTimeout, "learner-stall-timeout", 5*time.Minute, "remove a learner that makes no progress for this long, and fail the attempt")
	fs.DurationVar(&c.RecoveryTimeout, "recovery-timeout", 30*time.Minute, "give a recovery up after this long")
	fs.DurationVar(&c.ManifestRestoreDelay, "manifest-restore-delay", 3*time.Minute, "how long the etcd static-pod manifest must stay gone (removed by hand or by accident, not parked by the agent) before the agent puts back its checkpoint of the member's last good manifest; never for a member removed from the cluster or a Node annotated etcd-agent.io/decommission; 0: never")
	fs.DurationVar(&c.StopTimeout, "stop-timeout", 3*time.Minute, "how long a stop waits for etcd's process to go (client and peer URLs refuse, db lock free) before the step fails and is retried")
	fs.DurationVar(&c.RetryBackoff, "retry-backoff", time.Minute, "wait after a failed recovery before the next automatic one (doubles per failure)")
	fs.DurationVar(&c.MaxRetryBackoff, "max-retry-backoff", 30*time.Minute, "cap of --retry-backoff")
	fs.StringVar(&c.QuarantineDir, "quarantine-dir", "", "where replaced data dirs and pre-change snapshots are kept; same filesystem as the data dir (default: <data dir's parent>/etcd-agent-quarantine)")
	fs.IntVar(&c.QuarantineKeep, "quarantine-keep", 2, "quarantined copies of each kind (data dirs, pre-change snapshots) always kept; older ones are deleted once the member has been healthy since they were made (for --quarantine-prune-after) and no recovery is open: the agent's only deletion, logged and an Event")
	fs.DurationVar(&c.QuarantinePruneAfter, "quarantine-prune-after", 10*time.Minute, "how long the member must have been healthy before quarantined copies beyond --quarantine-keep are pruned (0: the default)")
	fs.StringVar(&c.SnapshotStore, "snapshot-store", "", "a snapshot store every node reaches: file:///dir (a shared filesystem mounted at that path on every node) or s3://bucket?endpoint=https://...&region=...[&use_path_style=true] (credentials from the AWS environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); add prefix=<env>/ when environments share a bucket; objects are verified by sha256 on every read")
	fs.IntVar(&c.SnapshotStoreKeep, "snapshot-store-keep", 10, "snapshots per cluster the snapshot store keeps; older ones are deleted after each upload")
	fs.BoolVar(&c.SnapshotStoreBackups, "snapshot-store-backups", true, "with --snapshot-store: upload every pre-change backup of a heal to it (in the background: a heal never waits on the store)")
	fs.BoolVar(&c.SeedCopyDuringStream, "seed-copy-during-stream", true, "with --rejoin-mode=seed and --seed-from-backup: the pre-change backup's stream also writes the seed's copy beside it (best effort; moved into the learner's data dir after the add, hashed again); false: the backup is copied after the add (one write less during the stream, on a disk the members share)")
	fs.BoolVar(&c.SeedFromBackup, "seed-from-backup", true, "with --rejoin-mode=seed: a rejoin's learner is seeded from a copy of the recovery's own pre-change backup (the db streamed once; the old member taken out of the copy and the learner written in, taken only when that is exactly the cluster's membership after the add); false: from a second stream off a follower after the add")
	fs.BoolVar(&c.SeedFromStore, "seed-from-store", true, "with --snapshot-store and --rejoin-mode=seed: a move's learner is seeded from the move's snapshot in the store (taken before the change, checked against the membership after it); false: from a second stream off a follower, as any rejoin")
	fs.StringVar(&c.RejoinMode, "rejoin-mode", "seed", "how the rejoining learner gets the data: seed (data dir built from a copy of the pre-change backup, or a follower's snapshot streamed after the add, so the leader sends no snapshot; falls back to raft on any seeding refusal or an etcd other than 3.6/3.7) or raft (empty data dir, the leader sends a raft snapshot)")
	fs.StringVar(&c.MemberRuntime, "member-runtime", "static-pod", "how to stop/start the local member: static-pod or exec")
	fs.StringVar(&c.StopCommand, "stop-command", "", "with --member-runtime=exec: command that stops etcd (e.g. systemctl stop etcd)")
	fs.StringVar(&c.StartCommand, "start-command", "", "with --member-runtime=exec: command that starts etcd; gets ETCD_INITIAL_CLUSTER and ETCD_INITIAL_CLUSTER_STATE=existing")
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}
