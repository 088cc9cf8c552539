package agent

import (
	"encoding/json"
	"errors"
	"io/fs"
	"slices"
	"sync/atomic"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
)

// reporter turns results into metrics, a status file, and a log line when
// the state or its reason changes (not every poll).
type reporter struct {
	node       *nodeStatus // nil without an API
	log        *zap.Logger
	metrics    *metrics.Metrics
	member     string
	statusPath string
	// where goes into every report.
	where *Where
	// latest, when set, gets every poll's report (served at /status).
	latest     *atomic.Pointer[Report]
	last       memberstate.Verdict
	lastMajor  bool
	lastCounts [2]int // voters, healthy voters in the last status written
	decision   plan.Decision
	// manifest is the manifest keeper's last answer (static pods).
	manifest *plan.ManifestRestore
	// gauges are the state gauges last set: a poll that changes none of
	// them sets none (each set is a labelled lookup, every poll, for
	// every member an agent serves).
	gauges *stateGauges
	// statusErr is the last status file write error logged ("" after a success).
	statusErr string
	// progress is where the healer says how far its long steps are; while
	// one runs, the status file is written at every export and the Node's
	// line every progressEvery.
	progress      *progress.Board
	progressEvery time.Duration
	lastProgress  []progress.Estimate
	published     time.Time // the Node's line, last written
	nodeBehind    bool      // a step started or ended since, not said yet (at most once a second)
	fileWritten   time.Time // the status file, last written for progress
}

// progressFileEvery bounds how often progress alone rewrites the status
// file (an observation while the healer waits comes every ~250 ms; each
// write is fsynced, on the disk etcd may share).
const progressFileEvery = time.Second

// majorityLostFileEvery is how often the status file is written again
// while the majority is lost (well within plan.AgentWordFreshFor).
const majorityLostFileEvery = 20 * time.Second

// decided records what the core said about res (status shows "what it
// would do, and why not"); the status file changes when the answer does.
func (r *reporter) decided(res memberstate.Result, d plan.Decision) {
	if d == r.decision {
		return
	}
	r.decision = d
	r.writeStatus(r.newReport(res))
}

func (r *reporter) newReport(res memberstate.Result) Report {
	rep := NewReport(res)
	rep.Where = r.where
	if r.decision.Action != "" {
		d := r.decision
		rep.Decision = &d
	}
	rep.Manifest = r.manifest
	rep.Progress = r.lastProgress
	return rep
}

// manifestAnswer records the manifest keeper's answer; the status file
// shows it from the next write on (the keeper answers after the export).
func (r *reporter) manifestAnswer(d plan.ManifestRestore) {
	if d.Quiet() {
		r.manifest = nil
		return
	}
	r.manifest = &d
}

func (r *reporter) export(res memberstate.Result, recovering bool) {
	if recovering {
		res.Verdict.State = memberstate.Recovering // shown as such; the healer decides on the tracker's own verdict
	}
	v, obs := res.Verdict, res.Observation
	if g := newStateGauges(obs, v.State); r.gauges == nil || *r.gauges != g {
		exportMetrics(r.metrics, r.member, obs, v.State)
		r.gauges = &g
	}
	exportPoll(r.metrics, r.member, obs, time.Since(obs.At))
	if v.State != r.last.State || v.Reason != r.last.Reason {
		lvl := r.log.Info
		if v.State == memberstate.Lost || v.State == memberstate.Down || v.State == memberstate.Degraded {
			lvl = r.log.Warn
		}
		lvl("member state changed", zap.String("from", string(r.last.State)), zap.String("to", string(v.State)),
			zap.String("reason", v.Reason), zap.String("detail", v.Detail), zap.String("dataDir", obs.Local.DataDirClass),
			zap.Int("voters", obs.Voters()), zap.Int("healthyVoters", obs.HealthyVoters()))
	}
	if v.MajorityLost != r.lastMajor {
		switch {
		case v.MajorityLost && v.State == memberstate.Recovering:
			r.log.Error("majority-lost: the cluster has no quorum; the recovery waits for it, nothing destructive",
				zap.Int("voters", obs.Voters()), zap.Int("healthyVoters", obs.HealthyVoters()), zap.String("memberList", obs.MemberListError))
		case v.MajorityLost:
			r.log.Error("majority-lost: the cluster has no quorum; the agent will not act (restore from backup is a human's call)",
				zap.Int("voters", obs.Voters()), zap.Int("healthyVoters", obs.HealthyVoters()), zap.String("memberList", obs.MemberListError))
		default:
			r.log.Info("quorum is back", zap.Int("voters", obs.Voters()), zap.Int("healthyVoters", obs.HealthyVoters()))
		}
	}
	// The quorum counts too: `status` must not show a margin long gone.
	counts := [2]int{obs.Voters(), obs.HealthyVoters()}
	changed := v.State != r.last.State || v.Reason != r.last.Reason || v.MajorityLost != r.lastMajor || counts != r.lastCounts
	r.last, r.lastMajor, r.lastCounts = v, v.MajorityLost, counts
	now := time.Now()
	var ests []progress.Estimate
	if recovering {
		ests = r.progress.Estimates(now)
	}
	moving := len(ests) > 0 || len(r.lastProgress) > 0 // a step runs, or the last one just ended
	stepsChanged := !slices.EqualFunc(ests, r.lastProgress, func(a, b progress.Estimate) bool { return a.Step == b.Step })
	r.lastProgress = ests
	// While the majority is lost the file is renewed: a pod member's start
	// gate takes a person's --force-new-cluster request only on a fresh
	// word from its agent (plan.DecideForceNewCluster).
	renew := v.MajorityLost && now.Sub(r.fileWritten) >= majorityLostFileEvery
	if changed || stepsChanged || renew || moving && now.Sub(r.fileWritten) >= progressFileEvery {
		r.fileWritten = now
		r.writeStatus(r.newReport(res))
	}
	if r.latest != nil {
		rep := r.newReport(res)
		r.latest.Store(&rep)
	}
	// A step starting or ending is said at once, or, within a second of
	// the last line, a second later (a learner flapping between serving
	// and not rewrites the Node at most once a second).
	r.nodeBehind = r.nodeBehind || stepsChanged
	if changed || r.nodeBehind && now.Sub(r.published) >= time.Second || moving && now.Sub(r.published) >= r.progressEvery {
		r.nodeBehind = false
		r.published = now
		r.node.publish(statusLine(r.member, res, ests))
	}
}

// writeStatus writes the status file; a failure is logged once per change
// of error (the file is written on every change of state), and the first
// success after one too.
func (r *reporter) writeStatus(rep Report) {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err == nil {
		err = fsutil.WriteFileAtomic(r.statusPath, b, 0o644)
	}
	msg := ""
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		msg = pe.Op + ": " + pe.Err.Error() // not the temp file's random name
	} else if err != nil {
		msg = err.Error()
	}
	if msg == r.statusErr {
		return
	}
	if err != nil {
		r.log.Warn("status file not written; `etcd-agent status` shows an older state", zap.String("path", r.statusPath), zap.Error(err))
	} else {
		r.log.Info("status file written again", zap.String("path", r.statusPath))
	}
	r.statusErr = msg
}

// stateGauges is what exportMetrics sets.
type stateGauges struct {
	state                   memberstate.State
	dataDir                 string
	voters, healthy, margin int
}

func newStateGauges(obs observation.Observation, state memberstate.State) stateGauges {
	return stateGauges{state: state, dataDir: obs.Local.DataDirClass, voters: obs.Voters(), healthy: obs.HealthyVoters(), margin: memberstate.QuorumMargin(obs)}
}

// exportMetrics sets the state gauges from one assessed observation; a
// result taken mid-recovery shows state Recovering.
func exportMetrics(m *metrics.Metrics, member string, obs observation.Observation, state memberstate.State) {
	g := newStateGauges(obs, state)
	for _, s := range memberstate.AllStates() {
		m.MemberState.WithLabelValues(member, string(s)).Set(metrics.Bool(s == state))
	}
	for _, c := range localdisk.AllClasses() {
		m.DataDirStatus.WithLabelValues(member, string(c)).Set(metrics.Bool(string(c) == obs.Local.DataDirClass))
	}
	m.VotingMembers.WithLabelValues(member).Set(float64(g.voters))
	m.HealthyVotingMembers.WithLabelValues(member).Set(float64(g.healthy))
	m.QuorumMargin.WithLabelValues(member).Set(float64(g.margin))
}

// exportPoll records one poll: how long it took, and foreign answers.
func exportPoll(m *metrics.Metrics, member string, obs observation.Observation, took time.Duration) {
	m.ObservationDuration.WithLabelValues(member).Observe(took.Seconds())
	for _, ep := range obs.ForeignEndpoints {
		m.ForeignEndpointResponses.WithLabelValues(member, ep).Inc()
	}
}
