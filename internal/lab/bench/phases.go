package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
)

// stepNames are where a heal's time goes, in order: detect (the fault to
// the recovery opened under the Lease), then each journal phase reached,
// as the time since the one before (done: the Lease released, closed).
var stepNames = []string{"detect", string(journal.PhaseStopped), string(journal.PhaseSnapshotted), string(journal.PhaseRemoved),
	string(journal.PhaseLearnerAdded), string(journal.PhasePrepared), string(journal.PhaseMemberStarted), string(journal.PhasePromoted),
	string(journal.PhaseVerified), string(journal.PhaseDone)}

// phaseSteps splits one heal's journal into stepNames' durations; a phase
// the heal did not pass through (the old member already gone: no
// removal) has none, and the next one counts from the last reached.
func phaseSteps(rec journal.Record, fault time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	prev, ok := rec.PhaseTimes[journal.PhaseStarted]
	if !ok {
		return out
	}
	out["detect"] = prev.Sub(fault)
	for _, name := range stepNames[1:] {
		at, ok := rec.PhaseTimes[journal.Phase(name)]
		if !ok {
			continue
		}
		out[name] = at.Sub(prev)
		prev = at
	}
	return out
}

// PrintPhases writes where the agent's heals spent their time: per size
// and mode, the median of each step over the runs.
func PrintPhases(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "db size\tmode\t")
	for _, s := range stepNames {
		fmt.Fprintf(tw, "%s\t", s)
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		for _, mode := range r.Modes {
			h := r.Heals[mode]
			if h == nil {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t", human(r.DBBytes), mode)
			for _, s := range stepNames {
				if ds := h.Steps[s]; len(ds) > 0 {
					fmt.Fprintf(tw, "%s\t", median(ds).Round(10*time.Millisecond))
				} else {
					fmt.Fprint(tw, "-\t")
				}
			}
			fmt.Fprintln(tw)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(where the agent's heal spends its time: the median over the runs of each step, from the fault; detect: to the recovery opened under the Lease; each phase: since the one before; done: verified to the Lease released)")
}

// streamTook is how long the pre-change stream ran, from the recovery's
// record of its long steps ("pre-change stream: 1.2 GiB in 7.5s (...)",
// to 100 ms): the stream starts before the stop ends (the backup streams
// while the member stops), so the journal's snapshotted minus stopped
// undercounts it, down to nothing for a stream shorter than the stop.
// Without the record's line, the phases' difference.
func streamTook(rec journal.Record) time.Duration {
	for _, s := range rec.Steps {
		rest, ok := strings.CutPrefix(s, "pre-change stream: ")
		if !ok {
			continue
		}
		_, took, ok := strings.Cut(rest, " in ")
		if !ok {
			continue
		}
		took, _, _ = strings.Cut(took, " ")
		if d, err := time.ParseDuration(took); err == nil {
			return d
		}
	}
	return rec.PhaseTimes[journal.PhaseSnapshotted].Sub(rec.PhaseTimes[journal.PhaseStopped])
}
