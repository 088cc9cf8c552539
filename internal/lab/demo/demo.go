// Package demo is `etcd-agent-lab demo`: bring up the lab with agents, put
// the API under a write load, wipe a member's data dir, and show the heal as
// a live timeline and a summary. It succeeds only if the heal did.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Options configure the demo.
type Options struct {
	Lab      lab.Options
	Victim   string        // node whose data dir is wiped
	Baseline time.Duration // API load before the fault, for the p99 baseline
	Timeout  time.Duration // for the heal
	// DBBytes, when set, fills the db to about that size first (512 KiB
	// values), so that the heal's long steps take long enough for the
	// timeline to say how far they are.
	DBBytes int64
	Out     io.Writer
}

// Result is the demo's summary.
type Result struct {
	Healed           bool
	TTR              time.Duration
	Detected         time.Duration
	APIAttempted     int
	APIFailed        int
	BaselineP99      time.Duration
	HealP99          time.Duration
	HashKVEqual      bool
	QuarantinePath   string
	SnapshotPath     string
	OldID, NewID     string
	FailureExplained string
}

// Run runs the demo on a fresh lab, which it leaves running for a person
// to explore (stop it with `etcd-agent-lab down`).
func Run(ctx context.Context, o Options) (Result, *lab.Lab, error) {
	var res Result
	out := o.Out
	step := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	o.Lab.Agents = true
	step("== bringing up a %d-node lab with agents in %s (etcd + kube-apiserver + one etcd-agent per node)", o.Lab.Nodes, o.Lab.Dir)
	start := time.Now()
	l, err := lab.Up(ctx, o.Lab)
	if err != nil {
		return res, l, err
	}
	step("   up in %.1fs; API %s", time.Since(start).Seconds(), l.Spec.APIServer.URL)
	kc, err := l.KubeClient()
	if err != nil {
		return res, l, err
	}
	cli, err := l.EtcdClient()
	if err != nil {
		return res, l, err
	}
	defer cli.Close()
	victim, err := l.Spec.Node(o.Victim)
	if err != nil {
		return res, l, err
	}
	if o.DBBytes > 0 {
		step("== filling the db to about %d MiB (512 KiB values)", o.DBBytes>>20)
		t := time.Now()
		if err := lab.FillDB(ctx, cli, "/demo/fill/", o.DBBytes); err != nil {
			return res, l, fmt.Errorf("fill: %w", err)
		}
		step("   filled in %.1fs", time.Since(t).Seconds())
	}
	step("== API write load: a ConfigMap and an etcd key every 50 ms; baseline for %s", o.Baseline)
	w, err := invariant.StartWriter(ctx, kc, cli, 50*time.Millisecond)
	if err != nil {
		return res, l, err
	}
	time.Sleep(o.Baseline) // the baseline is a duration of load, not a condition
	base := w.Snapshot()
	res.BaselineP99 = invariant.Percentile(base.APILatencies, 99)
	step("   baseline: %d API writes, p99 %s", base.APIAttempted, res.BaselineP99.Round(time.Millisecond))

	st := l.Status(ctx)
	for _, m := range st.Members {
		if m.Node == o.Victim {
			res.OldID = m.ID
		}
	}
	step("== fault: wiping %s's data dir %s while its etcd (member %s) runs", o.Victim, victim.DataDir, res.OldID)
	if err := l.WipeDataDir(o.Victim); err != nil {
		return res, l, err
	}
	t0 := time.Now()
	rec, err := watchTimeline(ctx, l, *victim, t0, o.Timeout, step, &res)
	final := w.Stop()
	healing := final.APILatencies[len(base.APILatencies):]
	res.APIAttempted, res.APIFailed = final.APIAttempted-base.APIAttempted, final.APIFailed-base.APIFailed
	res.HealP99 = invariant.Percentile(healing, 99)
	if err != nil {
		res.FailureExplained = err.Error()
		return res, l, nil
	}
	res.TTR = rec.FinishedAt.Sub(t0)
	res.QuarantinePath, res.SnapshotPath, res.NewID = rec.QuarantinePath, rec.SnapshotPath, fmt.Sprintf("%x", uint64(rec.NewMemberID))
	if err := w.VerifyAcked(ctx, final); err != nil {
		res.FailureExplained = err.Error()
		return res, l, nil
	}
	_, err = invariant.CheckHashKV(ctx, cli, 30*time.Second)
	res.HashKVEqual = err == nil
	if err != nil {
		res.FailureExplained = err.Error()
		return res, l, nil
	}
	if err := l.WaitHealthy(ctx, len(l.Spec.Nodes), 30*time.Second); err != nil {
		res.FailureExplained = err.Error()
		return res, l, nil
	}
	res.Healed = rec.Result == journal.ResultSucceeded && res.APIFailed == 0
	return res, l, nil
}

// watchTimeline polls the victim's agent (metrics) and journal and prints
// each step of the heal as it happens, until the journal closes.
func watchTimeline(ctx context.Context, l *lab.Lab, n lab.Node, t0 time.Time, timeout time.Duration,
	step func(string, ...any), res *Result) (journal.Record, error) {
	seenState := map[string]bool{}
	seenPhase := map[journal.Phase]bool{}
	at := func(t time.Time) string { return fmt.Sprintf("+%6.2fs", t.Sub(t0).Seconds()) }
	var final journal.Record
	var progress progressLines
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Until(t0.Add(timeout)), true, func(context.Context) (bool, error) {
		if m, err := l.AgentMetrics(ctx, n.Name); err == nil {
			dd := m.OneHot("etcd_agent_data_dir_status", "status")
			state := m.OneHot("etcd_agent_member_state", "state")
			if dd != "" && dd != "ok" && dd != "in-use" && !seenState["detected"] {
				seenState["detected"] = true
				res.Detected = time.Since(t0)
				step("%s  detected      data dir %s (fsnotify)", at(time.Now()), dd)
			}
			if state == "lost" && !seenState["lost"] {
				seenState["lost"] = true
				step("%s  lost          after the %s grace period (member still serves from open files)", at(time.Now()), lab.LabGracePeriod)
			}
			now := time.Now()
			for _, line := range progress.at(now, m.ByLabel("etcd_agent_recovery_step_progress_ratio", "step"), m.ByLabel("etcd_agent_recovery_step_eta_seconds", "step"),
				stalledSteps(n.StateDir)) {
				step("%s  progress      %s", at(now), line)
			}
		}
		rec, ok, _ := journal.Load(n.StateDir, n.Member)
		if ok && rec.StartedAt.After(t0) {
			for _, p := range []journal.Phase{journal.PhaseStarted, journal.PhaseStopped, journal.PhaseSnapshotted,
				journal.PhaseRemoved, journal.PhaseLearnerAdded, journal.PhasePrepared, journal.PhaseMemberStarted,
				journal.PhasePromoted, journal.PhaseVerified, journal.PhaseDone} {
				t, done := rec.PhaseTimes[p]
				if !done || seenPhase[p] {
					continue
				}
				seenPhase[p] = true
				step("%s  %-12s  %s", at(t), label(p), describe(p, rec))
			}
			if rec.Phase == journal.PhaseDone {
				final = rec
				for _, s := range rec.Steps {
					step("           long step     %s", s)
				}
				if rec.Result != journal.ResultSucceeded {
					return false, fmt.Errorf("recovery %s: %s %s", rec.Result, rec.Reason, rec.Message)
				}
				return true, nil
			}
		}
		return false, nil
	})
	switch {
	case err == nil:
		return final, nil
	case final.Phase == journal.PhaseDone:
		return final, err
	}
	return journal.Record{}, fmt.Errorf("not healed within %s; see %s", timeout, filepath.Join(n.LogsDir))
}

func label(p journal.Phase) string {
	switch p {
	case journal.PhaseStarted:
		return "lease"
	case journal.PhaseStopped:
		return "quarantined"
	case journal.PhaseSnapshotted:
		return "snapshot"
	case journal.PhaseLearnerAdded:
		return "learner"
	case journal.PhaseMemberStarted:
		return "started"
	case journal.PhaseDone:
		return "done"
	}
	return string(p)
}

func describe(p journal.Phase, r journal.Record) string {
	switch p {
	case journal.PhaseStarted:
		return "recovery Lease acquired; journal opened (" + r.Request + ")"
	case journal.PhaseStopped:
		q := r.QuarantinePath
		if q == "" {
			q = "(data dir was gone: nothing to keep)"
		}
		return "leadership handed off if needed, member stopped, old data dir kept at " + q
	case journal.PhaseSnapshotted:
		return fmt.Sprintf("pre-change backup streamed from %s (%d bytes, sha256 verified) to %s", r.SnapshotSource, r.SnapshotBytes, r.SnapshotPath)
	case journal.PhaseRemoved:
		return fmt.Sprintf("old member %x removed", uint64(r.OldMemberID))
	case journal.PhaseLearnerAdded:
		return fmt.Sprintf("new learner %x added with peer URLs %v", uint64(r.NewMemberID), r.PeerURLs)
	case journal.PhasePrepared:
		if from, ok := strings.CutPrefix(r.SeedSource, "backup:"); ok && r.RejoinMode == "seed" {
			return fmt.Sprintf("data dir seeded from a copy of the pre-change backup (%s's snapshot, streamed once) at index %d; start gate opens", from, r.SeedIndex)
		}
		if r.RejoinMode == "seed" {
			return fmt.Sprintf("data dir seeded from %s's snapshot at index %d; start gate opens", r.SeedSource, r.SeedIndex)
		}
		if r.SeedFallback != "" {
			return "seeding refused (" + r.SeedFallback + "), fell back to raft mode: data dir left for etcd to create, the leader sends a raft snapshot; start gate opens"
		}
		return "data dir left for etcd to create (raft mode: the leader sends a raft snapshot); start gate opens"
	case journal.PhaseMemberStarted:
		return "etcd started with --initial-cluster-state=existing"
	case journal.PhasePromoted:
		return "caught up; promoted to voter"
	case journal.PhaseVerified:
		return "member healthy, HashKV equal across voters"
	case journal.PhaseDone:
		return "Lease released, journal closed: " + r.Result
	}
	return ""
}

// Print writes the summary.
func (r Result) Print(w io.Writer) {
	fmt.Fprintln(w, "\n== summary")
	fmt.Fprintf(w, "   healed:            %v (member %s -> %s)\n", r.Healed, r.OldID, r.NewID)
	fmt.Fprintf(w, "   detected after:    %s\n", r.Detected.Round(time.Millisecond))
	fmt.Fprintf(w, "   time to recover:   %s (wipe -> promoted and verified; includes the %s grace)\n", r.TTR.Round(time.Millisecond), lab.LabGracePeriod)
	fmt.Fprintf(w, "   API writes:        %d attempted during the heal, %d failed\n", r.APIAttempted, r.APIFailed)
	fmt.Fprintf(w, "   API write p99:     %s before, %s during the heal\n", r.BaselineP99.Round(time.Millisecond), r.HealP99.Round(time.Millisecond))
	fmt.Fprintf(w, "   HashKV equal:      %v\n", r.HashKVEqual)
	q := r.QuarantinePath
	if q == "" {
		q = "(nothing to keep: the data dir was gone)"
	}
	fmt.Fprintf(w, "   quarantine:        %s\n", q)
	fmt.Fprintf(w, "   snapshot:          %s\n", r.SnapshotPath)
	if r.FailureExplained != "" {
		fmt.Fprintf(w, "   FAILED:            %s\n", r.FailureExplained)
	}
	_ = os.Stdout.Sync()
}
