package demo

import (
	"fmt"
	"slices"
	"time"
)

// progressEvery is how often the timeline says how far a long step is.
const progressEvery = time.Second

// progressLines turns the agent's progress gauges into the timeline's
// lines (issue 44: progress and ETA in the demo's timeline): a step's
// first sight, then at most one line per progressEvery while it runs, and
// one when its series is gone (ended). said is when each running step was
// last said; the caller keeps it between polls.
type progressLines struct {
	said map[string]time.Time
}

// at is one poll: ratio and eta by step (etcd_agent_recovery_step_progress_ratio
// and _eta_seconds); it returns what to print, steps in name order.
func (p *progressLines) at(now time.Time, ratio, eta map[string]float64) []string {
	if p.said == nil {
		p.said = map[string]time.Time{}
	}
	var out []string
	for _, step := range sortedKeys(ratio) {
		if last, ok := p.said[step]; ok && now.Sub(last) < progressEvery {
			continue
		}
		p.said[step] = now
		left := "time left not known yet"
		if e, ok := eta[step]; ok && e >= 0 {
			left = fmt.Sprintf("about %s left", (time.Duration(e * float64(time.Second))).Round(100*time.Millisecond))
		}
		out = append(out, fmt.Sprintf("%s %3.0f%%, %s", step, 100*ratio[step], left))
	}
	for _, step := range sortedKeys(p.said) {
		if _, running := ratio[step]; !running {
			delete(p.said, step)
			out = append(out, step+" ended")
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
