// Package metrics defines the agent's Prometheus metrics (prefix etcd_agent_,
// labels cluster and member on every series of a member) and sets them from
// what the agent observes and does. Names and labels are the contract with the alerts in deploy/.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "etcd_agent"

// Metrics holds every collector of the agent, as seen by the code of the
// members of one cluster: every vector carries a leading label cluster,
// already set (curried) here, so callers pass the labels that follow it
// (member first) to WithLabelValues.
//
// The cluster label is "" for the static-pod member source (one cluster per
// node: what New returns) and "<namespace>/<owner>" (the owning StatefulSet)
// for pod members, whose code gets m.ForCluster("<namespace>/<owner>"). One
// Registry holds the series of every cluster.
//
// A curried vector shares its series with the other clusters': Reset on it
// clears every cluster, and prometheus' own DeletePartialMatch ignores the
// curried label. StepStarted and StepExpected, the vectors deleted by partial
// match, are GaugeVecs whose DeletePartialMatch stays within the cluster;
// do not call Reset or DeletePartialMatch on the other fields.
type Metrics struct {
	Registry *prometheus.Registry

	MemberState          *prometheus.GaugeVec
	DataDirStatus        *prometheus.GaugeVec
	VotingMembers        *prometheus.GaugeVec
	HealthyVotingMembers *prometheus.GaugeVec
	QuorumMargin         *prometheus.GaugeVec
	RecoveryInProgress   *prometheus.GaugeVec
	LeaseHeld            *prometheus.GaugeVec
	RecoveriesTotal      *prometheus.CounterVec
	RefusalsTotal        *prometheus.CounterVec
	// RefusedSince is the Unix time since which the agent has been refused
	// continuously with a reason (0 when not): alerts on "refused for how
	// long", which RefusalsTotal (once per change of reason) cannot say.
	RefusedSince        *prometheus.GaugeVec
	RecoveryDuration    prometheus.ObserverVec
	PhaseDuration       prometheus.ObserverVec
	LearnerLag          *prometheus.GaugeVec
	SnapshotBytesTotal  *prometheus.CounterVec
	SeedFallbacksTotal  *prometheus.CounterVec
	LastRecovery        *prometheus.GaugeVec
	ObservationDuration prometheus.ObserverVec
	StartGateWrapped    *prometheus.GaugeVec
	// ManifestMissing is 1 while the static-pod manifest is gone and not
	// parked by the agent; ManifestRestoresTotal counts its checkpoint put
	// back.
	ManifestMissing       *prometheus.GaugeVec
	ManifestRestoresTotal *prometheus.CounterVec
	// SkeletonRestoresTotal counts the empty directory skeletons put back
	// into a data dir wiped while its member serves (plan.DecideSkeleton).
	SkeletonRestoresTotal *prometheus.CounterVec
	// ForeignEndpointResponses counts, per endpoint, the observations in
	// which it answered for another cluster than the pinned one.
	ForeignEndpointResponses *prometheus.CounterVec
	// HashMismatchTotal counts verifications that found voters with
	// different HashKV (reason hash-mismatch): a divergent voter serves.
	HashMismatchTotal *prometheus.CounterVec
	// LearnerRollbacksTotal counts stranded learners (another agent's,
	// its Lease expired, no progress for the stall timeout) this agent
	// removed (reason learner-rolled-back).
	LearnerRollbacksTotal *prometheus.CounterVec
	// StepStarted and StepExpected: the recovery step (or wait) running
	// now, by action: when it started and how long it may take before it
	// is worth a look (EtcdAgentRecoveryStepSlow). No series when none runs.
	StepStarted  *GaugeVec
	StepExpected *GaugeVec
	// StepProgress and StepETA: a long step's share done (0 to 1) and the
	// seconds it has left at its rate of the last 10 s (-1 not known yet),
	// by step (pre-change stream, seed stream, snapshot receive, catch-up;
	// internal/progress).
	// No series when none runs.
	StepProgress *GaugeVec
	StepETA      *GaugeVec
	// QuarantinePrunedTotal counts quarantined copies deleted under
	// --quarantine-keep, and untaken backups of a killed agent (the only
	// deletions of copies the agent makes);
	// QuarantinePruneErrors the deletions or listings that failed.
	QuarantinePrunedTotal *prometheus.CounterVec
	QuarantinePruneErrors *prometheus.CounterVec
	// EndpointsFileErrors counts learned endpoints files found unreadable
	// or corrupt at start (a corrupt one is kept aside, not read as empty).
	EndpointsFileErrors *prometheus.CounterVec
	// SnapshotStoreUploads counts pre-change backups sent to the snapshot
	// store (--snapshot-store), by result: uploaded, failed, dropped (the
	// upload queue was full).
	SnapshotStoreUploads *prometheus.CounterVec
	// KubeAPIDenied counts the agent's Kubernetes API requests answered
	// 403 (RBAC, the node-scope and lease-scope policies), by resource and
	// verb (docs/security.md): agent-wide, cluster "".
	KubeAPIDenied *prometheus.CounterVec

	base    *vectors // the registered vectors, not curried
	cluster string   // the cluster label every series of m carries
}

// GaugeVec is a GaugeVec curried with a cluster whose DeletePartialMatch
// deletes only that cluster's series (prometheus' ignores curried labels).
type GaugeVec struct {
	*prometheus.GaugeVec
	base    *prometheus.GaugeVec
	cluster string
}

// DeletePartialMatch deletes the cluster's series that match labels.
func (v *GaugeVec) DeletePartialMatch(labels prometheus.Labels) int {
	l := prometheus.Labels{clusterLabel: v.cluster}
	for k, val := range labels {
		if k == clusterLabel {
			return 0 // the curried label: prometheus' would match nothing
		}
		l[k] = val
	}
	return v.base.DeletePartialMatch(l)
}

const clusterLabel = "cluster"

// vectors are the registered vectors, labelled cluster, member, ...
type vectors struct {
	registry *prometheus.Registry

	memberState, dataDirStatus, votingMembers, healthyVotingMembers, quorumMargin *prometheus.GaugeVec
	recoveryInProgress, leaseHeld, refusedSince, learnerLag, lastRecovery         *prometheus.GaugeVec
	startGateWrapped, stepStarted, stepExpected, manifestMissing                  *prometheus.GaugeVec
	stepProgress, stepETA                                                         *prometheus.GaugeVec

	recoveriesTotal, refusalsTotal, snapshotBytesTotal, seedFallbacksTotal *prometheus.CounterVec
	foreignEndpointResponses, hashMismatchTotal, learnerRollbacksTotal     *prometheus.CounterVec
	quarantinePrunedTotal, quarantinePruneErrors, endpointsFileErrors      *prometheus.CounterVec
	snapshotStoreUploads, manifestRestoresTotal, skeletonRestoresTotal     *prometheus.CounterVec
	kubeAPIDenied                                                          *prometheus.CounterVec
	recoveryDuration, phaseDuration, observationDuration                   *prometheus.HistogramVec
}

// New registers every metric (and the Go and process collectors) in a fresh
// registry and returns them for cluster "" (the static-pod member source).
func New() *Metrics {
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, append([]string{clusterLabel}, labels...))
	}
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, append([]string{clusterLabel}, labels...))
	}
	h := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, append([]string{clusterLabel}, labels...))
	}
	durations := []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800}
	b := &vectors{
		registry:             prometheus.NewRegistry(),
		memberState:          g("member_state", "The local member's state, one-hot: healthy, degraded, down, lost, recovering, learner.", "member", "state"),
		dataDirStatus:        g("data_dir_status", "The local data dir's class, one-hot: ok, missing, empty, corrupt, foreign, in-use, stale (behind the member's high-water mark: a restored volume), not-a-directory (a file in its place).", "member", "status"),
		votingMembers:        g("cluster_voting_members", "Voting members in the cluster's member list.", "member"),
		healthyVotingMembers: g("cluster_healthy_voting_members", "Voting members that answered a linearizable read (the local one only with a usable data dir).", "member"),
		quorumMargin:         g("cluster_quorum_margin", "Healthy voting members minus quorum: 0 means one more failure loses the API; < 0 means the majority is lost.", "member"),
		recoveryInProgress:   g("recovery_in_progress", "1 while this agent heals its member.", "member"),
		leaseHeld:            g("lease_held", "1 while this agent holds the cluster's recovery Lease.", "member"),
		recoveriesTotal:      c("recoveries_total", "Recoveries finished, by result (succeeded, failed).", "member", "result"),
		refusalsTotal:        c("recovery_refusals_total", "Recoveries refused, by reason code: once per change of reason (a refusal that lasts counts once), and once per manual request answered no.", "member", "reason"),
		refusedSince: g("recovery_refused_since_timestamp_seconds",
			"Unix time since which the agent has been refused continuously with this reason; 0 when it is not.", "member", "reason"),
		recoveryDuration:   h("recovery_duration_seconds", "Time from a recovery's start to the member promoted and verified.", durations, "member"),
		phaseDuration:      h("recovery_phase_duration_seconds", "Time spent in each recovery phase.", durations, "member", "phase"),
		learnerLag:         g("learner_lag_entries", "The rejoining learner's applied index behind the leader's commit index.", "member"),
		snapshotBytesTotal: c("snapshot_bytes_total", "Bytes of snapshots streamed from peers.", "member"),
		seedFallbacksTotal: c("seed_fallbacks_total", "Seed-mode rejoins that fell back to raft mode, by reason.", "member", "reason"),
		lastRecovery:       g("last_recovery_timestamp_seconds", "Unix time of the last recovery's end.", "member"),
		observationDuration: h("observation_duration_seconds", "Time one observation (member list, probes, data dir check) takes.",
			prometheus.ExponentialBuckets(0.001, 2, 14), "member"),
		startGateWrapped: g("start_gate_wrapped", "1 when the etcd static pod runs etcd through the start gate (`etcd-agent gate -- etcd ...`), so every start, container restarts included, is checked; 0 when it does not.", "member"),
		foreignEndpointResponses: c("foreign_endpoint_responses_total",
			"Observations in which an endpoint answered for another cluster than the pinned one (its answers are ignored).", "member", "endpoint"),
		hashMismatchTotal: c("hash_mismatch_total",
			"Recovery verifications that found voters with different HashKV at one revision and compact revision (the recovery failed with reason hash-mismatch).", "member"),
		learnerRollbacksTotal: c("learner_rollbacks_total",
			"Stranded learners this agent removed: another agent's learner whose Lease expired and that made no progress for --learner-stall-timeout (reason learner-rolled-back).", "member"),
		stepStarted: g("recovery_step_started_timestamp_seconds",
			"Unix time at which the recovery step (or wait) running now started, by action; no series when none runs.", "member", "action"),
		stepExpected: g("recovery_step_expected_seconds",
			"How long the recovery step (or wait) running now may take before it is worth a look: half its own deadline (a wait: a fixed bound).", "member", "action"),
		stepProgress: g("recovery_step_progress_ratio",
			"The share done (0 to 1) of the long recovery step running now (pre-change stream, seed stream: bytes of the source's db; snapshot receive: bytes of the leader's db a raft-mode learner received; catch-up: the learner's gap to the leader closed), by step; no series when none runs.", "member", "step"),
		stepETA: g("recovery_step_eta_seconds",
			"Seconds the long recovery step running now has left at its rate of the last 10 s (-1: not known yet, or stalled), by step; no series when none runs.", "member", "step"),
		quarantinePrunedTotal: c("quarantine_pruned_total",
			"Quarantined data dirs and pre-change snapshots deleted: beyond --quarantine-keep once the member had been healthy since they were made, or a backup a killed agent streamed and never took (the only deletions of copies the agent makes).", "member"),
		quarantinePruneErrors: c("quarantine_prune_errors_total", "Quarantine listings or deletions that failed.", "member"),
		endpointsFileErrors: c("learned_endpoints_file_errors_total",
			"Learned endpoints files (endpoints.json in the state dir) found unreadable or corrupt at start; a corrupt one is kept aside as endpoints.json.corrupt-<time>.", "member"),
		manifestMissing: g("manifest_missing",
			"1 while the member's etcd static-pod manifest is gone and the agent did not park it (deleted by hand or by accident); the agent puts its checkpoint back after --manifest-restore-delay unless the member was removed or the Node decommissioned.", "member"),
		manifestRestoresTotal: c("manifest_restores_total",
			"Vanished etcd static-pod manifests this agent put back from its checkpoint of the member's last good manifest.", "member"),
		skeletonRestoresTotal: c("data_dir_skeleton_restores_total",
			"Empty, marked directory skeletons (data dir, member/, member/snap, the WAL dir) put back into a data dir wiped while its member serves, so that etcd's purge does not end the member before it is replaced; the marked dir is never started on.", "member"),
		snapshotStoreUploads: c("snapshot_store_uploads_total",
			"Pre-change backups sent to the snapshot store (--snapshot-store), by result: uploaded, failed, dropped (the upload queue was full; the backup stays in the quarantine).", "member", "result"),
		kubeAPIDenied: c("kube_api_denied_total",
			"The agent's Kubernetes API requests answered 403 Forbidden (RBAC, the node-scope or lease-scope admission policy), by resource and verb.", "resource", "verb"),
	}
	b.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, v := range b.all() {
		b.registry.MustRegister(v)
	}
	return b.forCluster("")
}

// ForCluster returns the metrics of the members of cluster
// ("<namespace>/<owner>" for pod members): the same Registry and series, with
// every vector curried with that cluster label.
func (m *Metrics) ForCluster(cluster string) *Metrics {
	return m.base.forCluster(cluster)
}

func (b *vectors) forCluster(cluster string) *Metrics {
	l := prometheus.Labels{clusterLabel: cluster}
	g := func(v *prometheus.GaugeVec) *prometheus.GaugeVec { return v.MustCurryWith(l) }
	c := func(v *prometheus.CounterVec) *prometheus.CounterVec { return v.MustCurryWith(l) }
	h := func(v *prometheus.HistogramVec) prometheus.ObserverVec { return v.MustCurryWith(l) }
	gp := func(v *prometheus.GaugeVec) *GaugeVec { return &GaugeVec{GaugeVec: g(v), base: v, cluster: cluster} }
	return &Metrics{
		Registry:                 b.registry,
		MemberState:              g(b.memberState),
		DataDirStatus:            g(b.dataDirStatus),
		VotingMembers:            g(b.votingMembers),
		HealthyVotingMembers:     g(b.healthyVotingMembers),
		QuorumMargin:             g(b.quorumMargin),
		RecoveryInProgress:       g(b.recoveryInProgress),
		LeaseHeld:                g(b.leaseHeld),
		RecoveriesTotal:          c(b.recoveriesTotal),
		RefusalsTotal:            c(b.refusalsTotal),
		RefusedSince:             g(b.refusedSince),
		RecoveryDuration:         h(b.recoveryDuration),
		PhaseDuration:            h(b.phaseDuration),
		LearnerLag:               g(b.learnerLag),
		SnapshotBytesTotal:       c(b.snapshotBytesTotal),
		SeedFallbacksTotal:       c(b.seedFallbacksTotal),
		LastRecovery:             g(b.lastRecovery),
		ObservationDuration:      h(b.observationDuration),
		StartGateWrapped:         g(b.startGateWrapped),
		ForeignEndpointResponses: c(b.foreignEndpointResponses),
		HashMismatchTotal:        c(b.hashMismatchTotal),
		LearnerRollbacksTotal:    c(b.learnerRollbacksTotal),
		StepStarted:              gp(b.stepStarted),
		StepExpected:             gp(b.stepExpected),
		StepProgress:             gp(b.stepProgress),
		StepETA:                  gp(b.stepETA),
		QuarantinePrunedTotal:    c(b.quarantinePrunedTotal),
		QuarantinePruneErrors:    c(b.quarantinePruneErrors),
		EndpointsFileErrors:      c(b.endpointsFileErrors),
		SnapshotStoreUploads:     c(b.snapshotStoreUploads),
		ManifestMissing:          g(b.manifestMissing),
		ManifestRestoresTotal:    c(b.manifestRestoresTotal),
		SkeletonRestoresTotal:    c(b.skeletonRestoresTotal),
		KubeAPIDenied:            c(b.kubeAPIDenied),
		base:                     b,
		cluster:                  cluster,
	}
}

// Forget deletes every series of member in m's cluster: the member left
// this node's agent (its pod moved or is gone, the static member retired
// or became another), and its last values (a quorum margin of 0, a "lost"
// state, a refusal) must not stay behind to fire alerts. It returns how
// many series it deleted.
func (m *Metrics) Forget(member string) int {
	l := prometheus.Labels{clusterLabel: m.cluster, "member": member}
	n := 0
	for _, v := range m.base.all() { // (one without a member label matches nothing)
		n += v.DeletePartialMatch(l)
	}
	return n
}

// vector is what every registered vector is.
type vector interface {
	prometheus.Collector
	DeletePartialMatch(prometheus.Labels) int
}

// all are the registered vectors (TestAllNamesEveryVector keeps it whole).
func (b *vectors) all() []vector {
	return []vector{b.memberState, b.dataDirStatus, b.votingMembers, b.healthyVotingMembers, b.quorumMargin, b.recoveryInProgress,
		b.leaseHeld, b.recoveriesTotal, b.refusalsTotal, b.refusedSince, b.recoveryDuration, b.phaseDuration, b.learnerLag,
		b.snapshotBytesTotal, b.seedFallbacksTotal, b.lastRecovery, b.observationDuration, b.startGateWrapped, b.foreignEndpointResponses,
		b.hashMismatchTotal, b.stepStarted, b.stepExpected, b.stepProgress, b.stepETA, b.quarantinePrunedTotal, b.quarantinePruneErrors, b.endpointsFileErrors,
		b.manifestMissing, b.manifestRestoresTotal, b.skeletonRestoresTotal,
		b.learnerRollbacksTotal, b.snapshotStoreUploads, b.kubeAPIDenied}
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Init sets every series of member (in m's cluster) to its zero so that dashboards and
// alerts see them before the first event (a counter that appears only on its
// first increment makes rate() and absent() lie): reasons are the refusal
// codes, phases the recovery phases timed (a histogram born at count 1 has
// no increase over its first observation).
func (m *Metrics) Init(member string, reasons, phases []string) {
	for _, r := range []string{"succeeded", "failed"} {
		m.RecoveriesTotal.WithLabelValues(member, r)
	}
	for _, r := range reasons {
		m.RefusalsTotal.WithLabelValues(member, r)
		m.RefusedSince.WithLabelValues(member, r).Set(0)
	}
	for _, p := range phases {
		m.PhaseDuration.WithLabelValues(member, p)
	}
	m.RecoveryDuration.WithLabelValues(member)
	m.RecoveryInProgress.WithLabelValues(member).Set(0)
	m.LeaseHeld.WithLabelValues(member).Set(0)
	m.SnapshotBytesTotal.WithLabelValues(member)
	m.HashMismatchTotal.WithLabelValues(member)
	m.QuarantinePrunedTotal.WithLabelValues(member)
	m.QuarantinePruneErrors.WithLabelValues(member)
	m.EndpointsFileErrors.WithLabelValues(member)
	m.LearnerRollbacksTotal.WithLabelValues(member)
	m.SkeletonRestoresTotal.WithLabelValues(member)
	for _, r := range []string{"uploaded", "failed", "dropped"} { // snapshotstore.Uploaded, ...
		m.SnapshotStoreUploads.WithLabelValues(member, r)
	}
}

// Bool is a 0/1 gauge value.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
