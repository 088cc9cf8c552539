package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/test/chaos/internal/linearize"
)

// finish undoes what the schedule may have left, settles, stops the
// observers and checks every invariant into rep.
func (r *runner) finish(ctx context.Context, rep *Report) {
	fctx := context.WithoutCancel(ctx)
	sctx, cancel := context.WithTimeout(fctx, 3*time.Minute)
	if err := r.withLab(func() error { return r.l.StartAPIServer(sctx) }); err != nil {
		rep.Violations = append(rep.Violations, "the API did not come back at the end: "+err.Error())
	}
	cancel()
	if err := r.settle(fctx, "", nil); err != nil {
		rep.Violations = append(rep.Violations, fmt.Sprintf("not every member a healthy voter %s after the faults stopped: %v; agents' last refusals: %s",
			r.o.Settle, err, r.lastRefusals()))
	} else if changed := changedIDs(r.lastSettled, r.memberIDs(fctx), ""); changed != "" {
		rep.Violations = append(rep.Violations, fmt.Sprintf("members rejoined after the last episode (#%d) had settled, with no fault: %s", r.lastEpisode, changed))
	}
	writes := r.writer.Stop()
	history := r.load.Stop()
	outages, probes := r.prober.Stop()
	maxLearners, _ := r.members.Stop()
	memberships := r.members.History()
	r.stopObservers() // ends the Lease watch too
	samples := r.lease.result()
	defer r.clients.close()

	rep.APIWrites, rep.APIFailed = writes.APIAttempted, writes.APIFailed
	rep.EtcdWrites, rep.EtcdFailed = writes.EtcdAttempted, writes.EtcdFailed
	rep.APIp99 = invariant.Percentile(writes.APILatencies, 99)
	rep.Probes = probes
	rep.Faults = r.faults
	rep.MaxLearners = maxLearners
	for _, o := range outages {
		d := o.Duration()
		rep.MaxUnavailable = max(rep.MaxUnavailable, d)
		if outside := r.outsideMajority(o); outside < d {
			rep.MajorityUnavailable = max(rep.MajorityUnavailable, d)
			d = outside
		}
		if d > r.o.Unavailable {
			rep.Violations = append(rep.Violations, fmt.Sprintf("quorum lost outside a majority fault: no member served a linearizable read from %s for %s (last error: %s)",
				o.From.Format("15:04:05.000"), d.Round(time.Millisecond), o.LastErr))
		}
	}
	for _, c := range Changes(memberships) {
		for _, w := range c.What {
			if strings.HasPrefix(w, "promote ") {
				rep.Promotions++
			}
		}
	}
	rep.Violations = append(rep.Violations, AuditMembership(memberships, Tenures(samples), r.majorityWindows)...)
	var etcdLogs []string
	for _, n := range *r.nodes.Load() {
		etcdLogs = append(etcdLogs, etcdLog(n.LogsDir, n.Name))
	}
	logged := LoggedChanges(etcdLogs)
	rep.LoggedChanges = len(logged)
	rep.Violations = append(rep.Violations, UnseenChanges(logged, memberships)...)
	for _, w := range r.majorityWindows {
		for _, c := range r.ledger.changesBetween(w.From, w.To) {
			rep.Violations = append(rep.Violations, fmt.Sprintf("data changed while episode #%d held a majority down: %s", w.Episode, c))
		}
	}
	starts, idv := r.ids.result()
	rep.EtcdStarts = starts
	rep.Violations = append(rep.Violations, idv...)
	rep.Violations = append(rep.Violations, r.ledger.finish(*r.nodes.Load())...)
	rep.DataDirs = r.ledger.seenDirs()

	vctx, cancel := context.WithTimeout(fctx, 2*time.Minute)
	defer cancel()
	if err := r.writer.VerifyAcked(vctx, writes); err != nil {
		rep.Violations = append(rep.Violations, err.Error())
	}
	lin := linearize.Check(history, 2*time.Minute, filepath.Join(r.o.Dir, "linearizability.html"))
	rep.Linearizable = lin
	switch {
	case lin.Unknown:
		rep.Violations = append(rep.Violations, fmt.Sprintf("linearizability not decided: the checker ran out of time on %d operations", lin.Ops))
	case !lin.Ok:
		rep.Violations = append(rep.Violations, fmt.Sprintf("etcd history of %d operations is not linearizable: see %s", lin.Ops, lin.VizPath))
	}
	if cli, err := r.clients.all(r.l); err == nil {
		h, err := invariant.CheckHashKV(vctx, cli, time.Minute)
		rep.HashKV = h
		if err != nil {
			rep.Violations = append(rep.Violations, err.Error())
		}
	}
	rep.Heals, rep.FailedHeals, rep.Refusals = r.agentLogCounts()
	failed, played := 0, 0
	for _, p := range rep.Episodes {
		if p.Skipped == "" {
			played++
		}
		if p.Err != "" {
			failed++
		}
	}
	if failed*5 > played {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%d of %d episodes could not make their fault: the run did not test what it says", failed, played))
	}
}

// outsideMajority is the part of an outage outside every majority fault's
// window, widened by a probe (a probe that began just before the fault
// fails with it) and by the election after it.
func (r *runner) outsideMajority(o invariant.Outage) time.Duration {
	from, to := o.From, o.To
	for _, w := range r.majorityWindows {
		wf, wt := w.From.Add(-time.Second-probeInterval), w.To.Add(r.o.Unavailable)
		if !to.After(wf) || !from.Before(wt) {
			continue
		}
		before, after := max(0, wf.Sub(from)), max(0, to.Sub(wt))
		return max(before, after)
	}
	return to.Sub(from)
}
