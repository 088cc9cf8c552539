package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/test/chaos/internal/linearize"
)

// Report is one run: what was injected, what the agents did, the figures
// the issue asks for, and every invariant broken (none: the run passed).
type Report struct {
	Seed     uint64        `json:"seed"`
	Mode     Mode          `json:"mode"`
	Duration time.Duration `json:"duration"`
	// Unavailable names catalog faults this machine cannot make, and why.
	Unavailable []string     `json:"unavailable,omitempty"`
	Episodes    []Played     `json:"episodes"`
	Faults      map[Kind]int `json:"faults"`
	// Heals and FailedHeals count the agents' "recovery succeeded" and
	// "recovery failed" log lines; Promotions the learners promoted as
	// the member list showed them.
	Heals, FailedHeals, Promotions int
	Refusals                       map[string]int `json:"refusals"`
	APIWrites, APIFailed           int
	EtcdWrites, EtcdFailed         int
	APIp99                         time.Duration `json:"apiP99"`
	Probes                         int
	// MaxUnavailable is the longest time no member served a linearizable
	// read; MajorityUnavailable the same within majority faults.
	MaxUnavailable      time.Duration `json:"maxUnavailable"`
	MajorityUnavailable time.Duration `json:"majorityUnavailable,omitempty"`
	MaxLearners         int           `json:"maxLearners"`
	EtcdStarts          int           `json:"etcdStarts"`
	// LoggedChanges counts the membership changes etcd's logs show, each
	// of which the watch must have seen (UnseenChanges).
	LoggedChanges int               `json:"loggedChanges"`
	DataDirs      int               `json:"dataDirs"`
	HashKV        map[string]uint32 `json:"hashKV"`
	Linearizable  linearize.Result  `json:"linearizable"`
	Violations    []string          `json:"violations"`
}

// Played is an episode as it ran.
type Played struct {
	Episode
	At      time.Duration `json:"at"`
	Node    string        `json:"node"`
	Err     string        `json:"err,omitempty"`
	Settled time.Duration `json:"settled"` // from its start to a healthy cluster
	Skipped string        `json:"skipped,omitempty"`
}

func (p Played) String() string {
	if p.Skipped != "" {
		return fmt.Sprintf("%s: skipped, %s", p.Episode, p.Skipped)
	}
	s := fmt.Sprintf("+%s %s on %s; healthy after %s", p.At, p.Episode, p.Node, p.Settled)
	if p.Err != "" {
		s += "; fault not made: " + p.Err
	}
	return s
}

// Passed says whether every invariant held.
func (r *Report) Passed() bool { return len(r.Violations) == 0 }

// Schedule is the printed schedule of the run.
func (r *Report) Schedule() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos seed %d (%s, %s): replay with CHAOS_SEED=%d CHAOS_MODE=%s\n", r.Seed, r.Mode, r.Duration, r.Seed, r.Mode)
	for _, p := range r.Episodes {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	return b.String()
}

// TableHeader and Row make the per-run table of docs/testing.md.
const TableHeader = "| seed | mode | result | episodes | faults by kind | heals (promotions) | refusals by reason | API p99 | max unavailable | lin. ops |\n|---|---|---|---|---|---|---|---|---|---|"

// Row is the run's line of the table.
func (r *Report) Row() string {
	result := "pass"
	if !r.Passed() {
		result = fmt.Sprintf("FAIL (%d)", len(r.Violations))
	}
	return fmt.Sprintf("| %d | %s | %s | %d | %s | %d (%d) | %s | %s | %s | %d |", r.Seed, r.Mode, result, len(r.Episodes),
		countsOf(r.Faults), r.Heals, r.Promotions, countsOf(r.Refusals), r.APIp99.Round(time.Millisecond),
		r.MaxUnavailable.Round(100*time.Millisecond), r.Linearizable.Ops)
}

func countsOf[K ~string](m map[K]int) string {
	if len(m) == 0 {
		return "-"
	}
	var out []string
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// Write saves the report as JSON in dir.
func (r *Report) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("chaos-%s-%d.json", r.Mode, r.Seed))
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// agentLogCounts reads every agent's log (every node, lost ones too).
func (r *runner) agentLogCounts() (heals, failed int, refusals map[string]int) {
	refusals = map[string]int{}
	for _, n := range *r.nodes.Load() {
		forEachLogLine(agentLog(n.LogsDir, n.Name), func(e map[string]any) {
			msg, _ := e["msg"].(string)
			switch {
			case msg == "recovery succeeded":
				heals++
			case strings.HasPrefix(msg, "recovery failed"):
				failed++
			case msg == "recovery refused":
				reason, _ := e["reason"].(string)
				refusals[reason]++
			}
		})
	}
	return heals, failed, refusals
}

// lastRefusals is each node's last refusal reason, for a run that did not settle.
func (r *runner) lastRefusals() string {
	var out []string
	for _, n := range *r.nodes.Load() {
		last := "none"
		forEachLogLine(agentLog(n.LogsDir, n.Name), func(e map[string]any) {
			if e["msg"] == "recovery refused" {
				last = fmt.Sprintf("%v (%v)", e["reason"], e["detail"])
			}
		})
		out = append(out, n.Name+": "+last)
	}
	return strings.Join(out, "; ")
}

func agentLog(logsDir, node string) string {
	return filepath.Join(logsDir, "etcd-agent-"+node+"_etcd-agent.log")
}

// forEachLogLine calls f for each JSON line of path (others are skipped).
func forEachLogLine(path string, f func(map[string]any)) {
	file, err := os.Open(path)
	if err != nil {
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			f(e)
		}
	}
}
