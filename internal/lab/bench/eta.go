package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// The ETA's accuracy (issue 44): while the agent heals, its progress gauges
// (etcd_agent_recovery_step_progress_ratio, _eta_seconds) are scraped every
// etaEvery; once a step's series is gone, the time left it predicted at 25,
// 50 and 75 % is set against the time it really had left.
const etaEvery = 250 * time.Millisecond

// ETAPoint is one prediction: at Done, the agent said Predicted was left;
// Actual was.
type ETAPoint struct {
	Done              float64
	Predicted, Actual time.Duration
}

// Error is the prediction's error, a share of the actual time left.
func (p ETAPoint) Error() float64 {
	if p.Actual <= 0 {
		return math.Inf(1)
	}
	return float64(p.Predicted-p.Actual) / float64(p.Actual)
}

// ETAStep is one step's predictions in one heal.
type ETAStep struct {
	Step    string
	Took    time.Duration // from its first sample to its series gone (within etaEvery/2)
	Points  []ETAPoint
	Samples int
	Trace   string // done@time since the first sample, for a step too short for a prediction
}

type etaSample struct {
	at        time.Time
	done, eta float64
}

// watchETA scrapes node's agent until the returned stop is called, and then
// says how the ETAs of each step that ended meanwhile fared.
func watchETA(ctx context.Context, l *lab.Lab, node string) (stop func() []ETAStep) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	samples := map[string][]etaSample{}
	gone := map[string]time.Time{} // between the last scrape with the series and the first without
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(etaEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := time.Now()
			m, err := l.AgentMetrics(ctx, node)
			if err != nil {
				continue // the agent restarting: no sample
			}
			seen := map[string]bool{}
			if fam, ok := m["etcd_agent_recovery_step_eta_seconds"]; ok {
				for _, s := range fam.Metric {
					labels := map[string]string{}
					for _, lp := range s.Label {
						labels[lp.GetName()] = lp.GetValue()
					}
					if labels["member"] != node {
						continue
					}
					step := labels["step"]
					ratio, _ := m.Value("etcd_agent_recovery_step_progress_ratio", map[string]string{"member": node, "step": step})
					seen[step] = true
					mu.Lock()
					samples[step] = append(samples[step], etaSample{now, ratio, s.GetGauge().GetValue()})
					mu.Unlock()
				}
			}
			mu.Lock()
			for step, ss := range samples {
				if !seen[step] && gone[step].IsZero() {
					last := ss[len(ss)-1].at
					gone[step] = last.Add(now.Sub(last) / 2)
				}
			}
			mu.Unlock()
		}
	}()
	return func() []ETAStep {
		cancel()
		<-done
		var out []ETAStep
		for step, ss := range samples {
			end, ok := gone[step]
			if !ok || len(ss) == 0 {
				continue
			}
			e := ETAStep{Step: step, Took: end.Sub(ss[0].at), Samples: len(ss)}
			for _, q := range []float64{0.25, 0.5, 0.75} {
				for _, s := range ss {
					if s.done >= q && s.eta >= 0 {
						e.Points = append(e.Points, ETAPoint{Done: s.done, Predicted: time.Duration(s.eta * float64(time.Second)), Actual: end.Sub(s.at)})
						break
					}
				}
			}
			if len(e.Points) == 0 {
				for _, s := range ss {
					e.Trace += fmt.Sprintf(" %.0f%%@%s/eta%.1fs", 100*s.done, s.at.Sub(ss[0].at).Round(10*time.Millisecond), s.eta)
				}
			}
			out = append(out, e)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
		return out
	}
}

// PrintETA writes how each heal's ETAs fared.
func PrintETA(w io.Writer, rows []Row) {
	for _, r := range rows {
		for _, mode := range r.Modes {
			h := r.Heals[mode]
			if h == nil {
				continue
			}
			for run, steps := range h.ETA {
				for _, s := range steps {
					fmt.Fprintf(w, "  %s %s run %d, %s (%s):", human(r.DBBytes), mode, run+1, s.Step, s.Took.Round(10*time.Millisecond))
					if len(s.Points) == 0 {
						fmt.Fprintf(w, " no prediction at 25%% or later in %d samples:%s", s.Samples, s.Trace)
					}
					for _, p := range s.Points {
						fmt.Fprintf(w, "  at %.0f%% predicted %s, actual %s (%+.0f%%)", 100*p.Done, p.Predicted.Round(10*time.Millisecond),
							p.Actual.Round(10*time.Millisecond), 100*p.Error())
					}
					fmt.Fprintln(w)
				}
			}
		}
	}
	fmt.Fprintf(w, "(ETA: the agent's etcd_agent_recovery_step_eta_seconds, scraped every %s, against the time the step really had left; its end is midway between the last scrape with its series and the first without)\n", etaEvery)
}
