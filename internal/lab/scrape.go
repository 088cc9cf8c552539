package lab

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape: metric families by name.
type Metrics map[string]*dto.MetricFamily

// Scrape reads a Prometheus /metrics endpoint.
func Scrape(ctx context.Context, url string) (Metrics, error) {
	return scrapeWith(ctx, http.DefaultClient, url)
}

func scrapeWith(ctx context.Context, hc *http.Client, url string) (Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	return Metrics(fams), err
}

// AgentMetrics scrapes node's agent.
func (l *Lab) AgentMetrics(ctx context.Context, node string) (Metrics, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return nil, err
	}
	if n.AgentMetricsURL == "" {
		return nil, fmt.Errorf("node %s runs no agent", node)
	}
	return Scrape(ctx, n.AgentMetricsURL)
}

// Value returns the value of the series of metric name whose labels include
// all of labels (gauge, counter or untyped); ok is false when none matches.
func (m Metrics) Value(name string, labels map[string]string) (float64, bool) {
	fam, ok := m[name]
	if !ok {
		return 0, false
	}
	for _, s := range fam.Metric {
		if !hasLabels(s, labels) {
			continue
		}
		switch {
		case s.Gauge != nil:
			return s.Gauge.GetValue(), true
		case s.Counter != nil:
			return s.Counter.GetValue(), true
		case s.Untyped != nil:
			return s.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// OneHot returns the label value of the series of a one-hot metric that is 1.
func (m Metrics) OneHot(name, label string) string {
	fam, ok := m[name]
	if !ok {
		return ""
	}
	for _, s := range fam.Metric {
		if s.Gauge != nil && s.Gauge.GetValue() == 1 {
			for _, lp := range s.Label {
				if lp.GetName() == label {
					return lp.GetValue()
				}
			}
		}
	}
	return ""
}

func hasLabels(s *dto.Metric, want map[string]string) bool {
	found := 0
	for _, lp := range s.Label {
		if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
			found++
		}
	}
	return found == len(want)
}

// sumOverRunningMembers scrapes every running member's etcd and adds up
// what of(scrape) returns. A running member that cannot be scraped is an
// error, not a zero: a missed leader would hide what it sent. A stopped one
// sends nothing (and its counters restart at 0 with it).
func (l *Lab) sumOverRunningMembers(ctx context.Context, of func(Metrics) float64) (float64, error) {
	var sum float64
	for _, n := range l.Spec.Nodes {
		if n.ClientURL == "" || n.Lost {
			continue
		}
		if _, err := l.EtcdPID(n.Name); err != nil {
			continue // not running
		}
		m, err := l.scrapeEtcd(ctx, n)
		if err != nil {
			return 0, fmt.Errorf("scrape etcd of %s at %s: %w", n.Name, n.ClientURL, err)
		}
		sum += of(m)
	}
	return sum, nil
}

// perRunningMember is of for each running member's process, keyed by
// node and PID: a restarted etcd is a new key whose counters start at 0.
func (l *Lab) perRunningMember(ctx context.Context, of func(Metrics) float64) (map[string]float64, error) {
	out := map[string]float64{}
	for _, n := range l.Spec.Nodes {
		if n.ClientURL == "" || n.Lost {
			continue
		}
		pid, err := l.EtcdPID(n.Name)
		if err != nil {
			continue // not running
		}
		m, err := l.scrapeEtcd(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("scrape etcd of %s at %s: %w", n.Name, n.ClientURL, err)
		}
		out[fmt.Sprintf("%s/%d", n.Name, pid)] = of(m)
	}
	return out, nil
}

// CounterGrowth is how much counters read per process (perRunningMember)
// grew between two reads: a process seen only after counts from 0, one
// gone by then counts nothing more (what it added before it ended is not
// known), so the growth is never negative.
func CounterGrowth(before, after map[string]float64) float64 {
	var sum float64
	for k, v := range after {
		if b, ok := before[k]; ok && v >= b {
			sum += v - b
		} else {
			sum += v
		}
	}
	return sum
}

// CPUByProcess is the CPU seconds (process_cpu_seconds_total) of each
// running etcd process, for CounterGrowth.
func (l *Lab) CPUByProcess(ctx context.Context) (map[string]float64, error) {
	return l.perRunningMember(ctx, func(m Metrics) float64 {
		v, _ := m.Value("process_cpu_seconds_total", nil)
		return v
	})
}

// LeaderProcess is the running etcd process (as perRunningMember keys it,
// node/pid) that says it leads; "" when none does.
func (l *Lab) LeaderProcess(ctx context.Context) (string, error) {
	leads, err := l.perRunningMember(ctx, func(m Metrics) float64 {
		v, _ := m.Value("etcd_server_is_leader", nil)
		return v
	})
	for k, v := range leads {
		if v > 0 {
			return k, err
		}
	}
	return "", err
}

// SnapshotsSentByProcess is SnapshotsSent per running etcd process, for
// CounterGrowth.
func (l *Lab) SnapshotsSentByProcess(ctx context.Context) (map[string]float64, error) {
	return l.perRunningMember(ctx, snapshotsSent)
}

func snapshotsSent(m Metrics) float64 {
	var sum float64
	if fam, ok := m["etcd_network_snapshot_send_success"]; ok {
		for _, s := range fam.Metric {
			if s.Counter != nil {
				sum += s.Counter.GetValue()
			}
		}
	}
	return sum
}

// SnapshotsSent sums etcd_network_snapshot_send_success over the running
// members: the raft snapshots sent so far (a leader sends one to a learner
// that is too far behind; seed mode's point is that it need not).
func (l *Lab) SnapshotsSent(ctx context.Context) (float64, error) {
	return l.sumOverRunningMembers(ctx, snapshotsSent)
}

// BytesSentTo sums etcd_network_peer_sent_bytes_total{To=<id>} over the
// running members: every byte the cluster sent to member id over raft (log
// entries and raft snapshots alike). For a new learner's ID it is what its
// catch-up cost the leader.
func (l *Lab) BytesSentTo(ctx context.Context, id uint64) (float64, error) {
	to := strconv.FormatUint(id, 16)
	return l.sumOverRunningMembers(ctx, func(m Metrics) float64 {
		v, _ := m.Value("etcd_network_peer_sent_bytes_total", map[string]string{"To": to})
		return v
	})
}

// ByLabel returns the values of metric name's series by their label's
// value (gauge series only).
func (m Metrics) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	fam, ok := m[name]
	if !ok {
		return out
	}
	for _, s := range fam.Metric {
		if s.Gauge == nil {
			continue
		}
		for _, lp := range s.Label {
			if lp.GetName() == label {
				out[lp.GetValue()] = s.Gauge.GetValue()
			}
		}
	}
	return out
}
