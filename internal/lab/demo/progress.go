package demo

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/progress"
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
// and _eta_seconds), and since when a step has stalled (the agent's status
// file: the ETA gauge is -1 both while not known yet and while stalled); it
// returns what to print, steps in name order.
func (p *progressLines) at(now time.Time, ratio, eta map[string]float64, stalled map[string]time.Time) []string {
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
		} else if since, ok := stalled[step]; ok && !since.IsZero() {
			left = fmt.Sprintf("STALLED since %s, %s ago", since.UTC().Format("15:04:05Z"), now.Sub(since).Round(time.Second))
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

// stalledSteps is since when each stalled step of the agent's latest report
// (its status file in stateDir) has stalled; nil when it cannot be read.
func stalledSteps(stateDir string) map[string]time.Time {
	b, err := os.ReadFile(filepath.Join(stateDir, memberruntime.StatusFile))
	if err != nil {
		return nil
	}
	var r struct {
		Progress []progress.Estimate `json:"progress"`
	}
	if json.Unmarshal(b, &r) != nil {
		return nil
	}
	out := map[string]time.Time{}
	for _, e := range r.Progress {
		if !e.StalledSince.IsZero() {
			out[e.Step] = e.StalledSince
		}
	}
	return out
}
