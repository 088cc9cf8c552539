// Package memberstate turns a time-ordered sequence of observations of the
// local etcd member into its state (healthy, degraded, down, lost, learner),
// with hysteresis so that one bad poll never condemns a member.
//
// It is pure: no I/O and no clock. Time comes in with each Sample, so every
// rule is provable with plain function calls (the go.etcd.io/raft model).
//
// Hysteresis (docs/design.md rule 6, the bootkube lesson): a member is lost only
// after it has been continuously unhealthy for the grace period, or at once
// when its data dir is missing/empty, or corrupt/foreign as confirmed by the
// deep check, and it is not serving (nothing is left to wait for). A single healthy or learner sample ends the
// unhealthy run, so a member restarted within the grace period never becomes
// lost.
package memberstate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// State is the local member's state, as exported in the one-hot
// etcd_agent_member_state metric.
type State string

const (
	Healthy  State = "healthy"
	Degraded State = "degraded" // serving, but would not survive a restart or has an alarm
	Down     State = "down"     // not serving, still within the grace period
	Lost     State = "lost"     // needs healing
	// Recovering is set by the agent while it heals the member; the Tracker
	// never produces it.
	Recovering State = "recovering"
	Learner    State = "learner" // serving as a learner (a rejoin in progress)
)

// AllStates lists every state in a stable order, for one-hot metrics.
func AllStates() []State {
	return []State{Healthy, Degraded, Down, Lost, Recovering, Learner}
}

// Data dir classes, as reported by the localdisk package.
const (
	dataDirOK      = observation.DataDirOK
	dataDirInUse   = observation.DataDirInUse
	dataDirMissing = observation.DataDirMissing
	dataDirEmpty   = observation.DataDirEmpty
	dataDirCorrupt = observation.DataDirCorrupt
	dataDirForeign = observation.DataDirForeign
	dataDirStale   = observation.DataDirStale
	// A file in place of the data dir: proof by the layout check alone.
	dataDirNotADirectory = observation.DataDirNotADirectory
)

// Sample is one poll's observation of the local member and its cluster.
type Sample struct {
	At      time.Time // when the poll ran; the only clock the tracker knows
	Serving bool      // local member answered a linearizable health check / Status in this poll
	// AuthFailed: the local member's TLS handshake failed on trust (a
	// certificate the agent cannot verify, or its own refused): it may
	// serve everyone else, the agent cannot tell.
	AuthFailed bool
	IsLearner  bool   // local member is a learner in the member list
	DataDir    string // class from localdisk: "ok", "missing", "empty", "corrupt", "foreign", "in-use", "stale", "not-a-directory"
	// DataDirVerified: the deep check confirmed DataDir (localdisk.Classify
	// finished). Corrupt and foreign are lost at once only when confirmed.
	DataDirVerified bool
	Alarms          []string // local member's alarms, e.g. "NOSPACE", "CORRUPT"

	HealthyVoters, Voters int // cluster-wide, from this poll
	HasLeader             bool

	InMemberList bool // local member (matched by name and peer URL) is in the cluster's member list
}

// Config tunes the hysteresis.
type Config struct {
	// GracePeriod is how long a member must be continuously unhealthy before
	// it is lost. Zero or negative still needs two unhealthy samples.
	GracePeriod time.Duration
	// MaxSampleGap, when positive, restarts the unhealthy run when two
	// samples are further apart than this: "continuously unhealthy" needs
	// continuous observation, and a stalled agent has none (the member may
	// have been healthy in between). Zero means no limit.
	MaxSampleGap time.Duration
}

// Verdict is the tracker's judgement after one sample.
type Verdict struct {
	State State
	// Reason is a short machine-friendly cause: "healthy", "learner",
	// "not-serving", "not-a-member", "alarm:NOSPACE", "data-dir-missing",
	// "data-dir-empty", "data-dir-corrupt", "data-dir-foreign", "data-dir-not-a-directory",
	// "data-dir-unknown", "tls-auth-failed". It names the cause even when
	// the state is Lost.
	Reason string
	Detail string // for people: every problem seen, and the grace period's progress
	// TroubleSince is the start of the current continuous unhealthy run
	// (zero when healthy or learner).
	TroubleSince time.Time
	// MajorityLost is HealthyVoters < Quorum(Voters) or no leader, whatever
	// the local state.
	MajorityLost bool
}

// InGracePeriod reports whether the member is unhealthy but not (yet) lost:
// the "in-grace-period" refusal.
func (v Verdict) InGracePeriod() bool {
	return !v.TroubleSince.IsZero() && v.State != Lost
}

// Quorum is the number of voters a cluster of n voters needs: n/2+1. It is
// 1 for n <= 0, so an empty or unknown member list never looks like quorum.
func Quorum(n int) int {
	if n < 0 {
		n = 0
	}
	return n/2 + 1
}

// QuorumMargin is healthy voters minus the quorum of the last member list
// seen: 0 means one more failure loses the API, < 0 that the majority is
// lost. A member list that did not answer means no quorum answered it: at
// most -1 then. The one margin `status` and etcd_agent_cluster_quorum_margin
// both show.
func QuorumMargin(o observation.Observation) int {
	m := o.HealthyVoters() - Quorum(o.Voters())
	if o.MemberListError != "" {
		m = min(m, -1)
	}
	return m
}

// Tracker remembers the current unhealthy run of one member. The zero value
// is ready to use. It is not safe for concurrent use.
type Tracker struct {
	seen         bool
	lastAt       time.Time
	troubleSince time.Time // zero when not in an unhealthy run
	troubleCount int       // samples in the current unhealthy run
}

// Observe feeds one sample (in time order) and returns the verdict.
//
// A sample older than the previous one (clock skew, a stepped clock) cannot
// be trusted to measure the run, so the run restarts at that sample's time:
// skew can delay "lost", never hasten it.
func (t *Tracker) Observe(s Sample, cfg Config) Verdict {
	restart := t.seen && (s.At.Before(t.lastAt) ||
		cfg.MaxSampleGap > 0 && s.At.Sub(t.lastAt) > cfg.MaxSampleGap)
	t.seen, t.lastAt = true, s.At

	a := assess(s)
	if a.neverLost {
		// Not counted toward the grace period: the run starts afresh
		// once the agent can see the member again.
		t.troubleSince, t.troubleCount = time.Time{}, 0
		return Verdict{State: a.state, Reason: a.reason, Detail: a.detail,
			MajorityLost: s.HealthyVoters < Quorum(s.Voters) || !s.HasLeader}
	}
	v := Verdict{
		State:        a.state,
		Reason:       a.reason,
		Detail:       a.detail,
		MajorityLost: s.HealthyVoters < Quorum(s.Voters) || !s.HasLeader,
	}
	if !a.trouble {
		t.troubleSince, t.troubleCount = time.Time{}, 0
		return v
	}
	if t.troubleCount == 0 || restart {
		t.troubleSince, t.troubleCount = s.At, 0
	}
	t.troubleCount++
	v.TroubleSince = t.troubleSince

	grace := max(cfg.GracePeriod, 0)
	unhealthyFor := s.At.Sub(t.troubleSince)
	switch {
	case a.lostAtOnce:
		v.State = Lost
		v.Detail += "; lost at once, no grace period applies"
	case t.troubleCount >= 2 && unhealthyFor >= grace:
		v.State = Lost
		v.Detail += fmt.Sprintf("; unhealthy for %s since %s, grace period %s is over",
			unhealthyFor, t.troubleSince.UTC().Format(time.RFC3339), grace)
	default:
		v.Detail += fmt.Sprintf("; unhealthy for %s of the %s grace period", unhealthyFor, grace)
	}
	return v
}

// assessment is what one sample says on its own, before hysteresis.
type assessment struct {
	state      State
	reason     string
	detail     string
	trouble    bool // not healthy: counts toward the grace period
	lostAtOnce bool
	// neverLost: nothing this sample shows may end in lost (the member's
	// TLS handshake fails on trust: it may serve, the agent cannot tell).
	neverLost bool
}

type problem struct{ reason, detail string }

// assess classifies one sample. Problems are listed most telling first (a
// gone data dir, then not being a member, which decide how the member must be
// healed); the first one is the Reason, all of them go in the Detail.
func assess(s Sample) assessment {
	if !s.Serving && s.AuthFailed {
		// Before anything else: what follows judges a member the agent
		// cannot see (its data dir may be a mid-restart view, its member
		// list entry another cert's). docs/recovery.md, "TLS".
		return assessment{state: Degraded, reason: "tls-auth-failed", neverLost: true,
			detail: "the member's TLS handshake fails on trust (a certificate the agent cannot verify, e.g. mid CA rotation, or the agent's own refused): it may serve, the agent cannot tell; never judged lost while this lasts"}
	}
	var problems []problem
	dataDirGone, dataDirKnown, dataDirSure := false, true, true
	switch s.DataDir {
	case dataDirOK, dataDirInUse:
	case dataDirMissing, dataDirEmpty, dataDirNotADirectory:
		dataDirGone = true
		problems = append(problems, problem{"data-dir-" + s.DataDir, "data dir is " + s.DataDir})
	case dataDirCorrupt, dataDirForeign, dataDirStale:
		// The layout check's corrupt can be a member bootstrapping (its db
		// exists before its WAL): only the deep check's word is proof.
		dataDirGone, dataDirSure = true, s.DataDirVerified
		detail := "data dir is " + s.DataDir
		if !dataDirSure {
			detail += " (layout check only, not confirmed)"
		}
		problems = append(problems, problem{"data-dir-" + s.DataDir, detail})
	default:
		dataDirKnown = false
	}
	if !s.InMemberList {
		problems = append(problems, problem{"not-a-member", "member (by name and peer URL) is not in the cluster's member list"})
	}
	if !s.Serving {
		problems = append(problems, problem{"not-serving", "member does not answer health checks"})
	}
	if !dataDirKnown {
		// Not healthy (nothing shows the data is there) but no proof of loss
		// either: the grace period applies, never the at-once rule.
		problems = append(problems, problem{"data-dir-unknown", fmt.Sprintf("data dir class %q is unknown", s.DataDir)})
	}
	if len(s.Alarms) > 0 {
		alarms := slices.Sorted(slices.Values(s.Alarms))
		problems = append(problems, problem{"alarm:" + alarms[0], "alarms active: " + strings.Join(alarms, ", ")})
	}

	switch {
	case len(problems) == 0 && s.IsLearner:
		return assessment{state: Learner, reason: "learner", detail: "member is serving as a learner"}
	case len(problems) == 0:
		return assessment{state: Healthy, reason: "healthy", detail: "member is serving with a healthy data dir"}
	}

	a := assessment{state: Degraded, reason: problems[0].reason, trouble: true}
	details := make([]string, 0, len(problems)+1)
	for _, p := range problems {
		details = append(details, p.detail)
	}
	switch {
	case !s.Serving && dataDirGone:
		a.state, a.lostAtOnce = Down, dataDirSure
	case !s.Serving:
		a.state = Down
	case dataDirGone:
		details = append(details, "the member still serves from open files and cannot survive a restart")
	}
	a.detail = strings.Join(details, "; ")
	return a
}
