// Package metrics defines the agent's Prometheus metrics (prefix etcd_agent_,
// label member where per member) and sets them from what the agent observes
// and does. Names and labels are the contract with the alerts in deploy/.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "etcd_agent"

// Metrics holds every collector of the agent.
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
	RecoveryDuration    *prometheus.HistogramVec
	PhaseDuration       *prometheus.HistogramVec
	LearnerLag          *prometheus.GaugeVec
	SnapshotBytesTotal  *prometheus.CounterVec
	SeedFallbacksTotal  *prometheus.CounterVec
	LastRecovery        *prometheus.GaugeVec
	ObservationDuration *prometheus.HistogramVec
	StartGateWrapped    *prometheus.GaugeVec
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
	StepStarted  *prometheus.GaugeVec
	StepExpected *prometheus.GaugeVec
	// QuarantinePrunedTotal counts quarantined copies deleted under
	// --quarantine-keep (the only deletions the agent makes);
	// QuarantinePruneErrors the deletions or listings that failed.
	QuarantinePrunedTotal *prometheus.CounterVec
	QuarantinePruneErrors *prometheus.CounterVec
	// EndpointsFileErrors counts learned endpoints files found unreadable
	// or corrupt at start (a corrupt one is kept aside, not read as empty).
	EndpointsFileErrors *prometheus.CounterVec
}

// New registers every metric (and the Go and process collectors) in a fresh registry.
func New() *Metrics {
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	c := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	h := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
	}
	durations := []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800}
	m := &Metrics{
		Registry:             prometheus.NewRegistry(),
		MemberState:          g("member_state", "The local member's state, one-hot: healthy, degraded, down, lost, recovering, learner.", "member", "state"),
		DataDirStatus:        g("data_dir_status", "The local data dir's class, one-hot: ok, missing, empty, corrupt, foreign, in-use.", "member", "status"),
		VotingMembers:        g("cluster_voting_members", "Voting members in the cluster's member list.", "member"),
		HealthyVotingMembers: g("cluster_healthy_voting_members", "Voting members that answered a linearizable read (the local one only with a usable data dir).", "member"),
		QuorumMargin:         g("cluster_quorum_margin", "Healthy voting members minus quorum: 0 means one more failure loses the API; < 0 means the majority is lost.", "member"),
		RecoveryInProgress:   g("recovery_in_progress", "1 while this agent heals its member.", "member"),
		LeaseHeld:            g("lease_held", "1 while this agent holds the cluster's recovery Lease.", "member"),
		RecoveriesTotal:      c("recoveries_total", "Recoveries finished, by result (succeeded, failed).", "member", "result"),
		RefusalsTotal:        c("recovery_refusals_total", "Recoveries refused, by reason code: once per change of reason (a refusal that lasts counts once), and once per manual request answered no.", "member", "reason"),
		RefusedSince: g("recovery_refused_since_timestamp_seconds",
			"Unix time since which the agent has been refused continuously with this reason; 0 when it is not.", "member", "reason"),
		RecoveryDuration:   h("recovery_duration_seconds", "Time from a recovery's start to the member promoted and verified.", durations, "member"),
		PhaseDuration:      h("recovery_phase_duration_seconds", "Time spent in each recovery phase.", durations, "member", "phase"),
		LearnerLag:         g("learner_lag_entries", "The rejoining learner's applied index behind the leader's commit index.", "member"),
		SnapshotBytesTotal: c("snapshot_bytes_total", "Bytes of snapshots streamed from peers.", "member"),
		SeedFallbacksTotal: c("seed_fallbacks_total", "Seed-mode rejoins that fell back to raft mode, by reason.", "member", "reason"),
		LastRecovery:       g("last_recovery_timestamp_seconds", "Unix time of the last recovery's end.", "member"),
		ObservationDuration: h("observation_duration_seconds", "Time one observation (member list, probes, data dir check) takes.",
			prometheus.ExponentialBuckets(0.001, 2, 14), "member"),
		StartGateWrapped: g("start_gate_wrapped", "1 when the etcd static pod runs etcd through the start gate (`etcd-agent gate -- etcd ...`), so every start, container restarts included, is checked; 0 when it does not.", "member"),
		ForeignEndpointResponses: c("foreign_endpoint_responses_total",
			"Observations in which an endpoint answered for another cluster than the pinned one (its answers are ignored).", "member", "endpoint"),
		HashMismatchTotal: c("hash_mismatch_total",
			"Recovery verifications that found voters with different HashKV at one revision and compact revision (the recovery failed with reason hash-mismatch).", "member"),
		LearnerRollbacksTotal: c("learner_rollbacks_total",
			"Stranded learners this agent removed: another agent's learner whose Lease expired and that made no progress for --learner-stall-timeout (reason learner-rolled-back).", "member"),
		StepStarted: g("recovery_step_started_timestamp_seconds",
			"Unix time at which the recovery step (or wait) running now started, by action; no series when none runs.", "member", "action"),
		StepExpected: g("recovery_step_expected_seconds",
			"How long the recovery step (or wait) running now may take before it is worth a look: half its own deadline (a wait: a fixed bound).", "member", "action"),
		QuarantinePrunedTotal: c("quarantine_pruned_total",
			"Quarantined data dirs and pre-change snapshots deleted beyond --quarantine-keep, once the member had been healthy since they were made (the only deletions the agent makes).", "member"),
		QuarantinePruneErrors: c("quarantine_prune_errors_total", "Quarantine listings or deletions that failed.", "member"),
		EndpointsFileErrors: c("learned_endpoints_file_errors_total",
			"Learned endpoints files (endpoints.json in the state dir) found unreadable or corrupt at start; a corrupt one is kept aside as endpoints.json.corrupt-<time>.", "member"),
	}
	m.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.MemberState, m.DataDirStatus, m.VotingMembers, m.HealthyVotingMembers, m.QuorumMargin, m.RecoveryInProgress,
		m.LeaseHeld, m.RecoveriesTotal, m.RefusalsTotal, m.RefusedSince, m.RecoveryDuration, m.PhaseDuration, m.LearnerLag,
		m.SnapshotBytesTotal, m.SeedFallbacksTotal, m.LastRecovery, m.ObservationDuration, m.StartGateWrapped, m.ForeignEndpointResponses,
		m.HashMismatchTotal, m.StepStarted, m.StepExpected, m.QuarantinePrunedTotal, m.QuarantinePruneErrors, m.EndpointsFileErrors,
		m.LearnerRollbacksTotal)
	return m
}

// Handler serves the registry.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Init sets every series of member to its zero so that dashboards and
// alerts see them before the first event (a counter that appears only on its
// first increment makes rate() and absent() lie).
func (m *Metrics) Init(member string, reasons []string) {
	for _, r := range []string{"succeeded", "failed"} {
		m.RecoveriesTotal.WithLabelValues(member, r)
	}
	for _, r := range reasons {
		m.RefusalsTotal.WithLabelValues(member, r)
		m.RefusedSince.WithLabelValues(member, r).Set(0)
	}
	m.RecoveryInProgress.WithLabelValues(member).Set(0)
	m.LeaseHeld.WithLabelValues(member).Set(0)
	m.SnapshotBytesTotal.WithLabelValues(member)
	m.HashMismatchTotal.WithLabelValues(member)
	m.QuarantinePrunedTotal.WithLabelValues(member)
	m.QuarantinePruneErrors.WithLabelValues(member)
	m.EndpointsFileErrors.WithLabelValues(member)
	m.LearnerRollbacksTotal.WithLabelValues(member)
}

// Bool is a 0/1 gauge value.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
