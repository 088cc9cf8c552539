package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb"
)

// The recording is loaded into a Prometheus TSDB the way Prometheus, scraping
// through the shipped ServiceMonitor, would have stored it; the dashboard's
// own PromQL is then evaluated over it by Prometheus's query engine.
const (
	scrapeJob = "etcd-agent" // the Service's name (deploy/daemonset/service.yaml)
	// lookbackDelta is Prometheus's default: an instant selector sees the
	// last sample up to 5 minutes back (a stale marker ends that early).
	lookbackDelta = 5 * time.Minute
)

// promStore is a recording in a TSDB, ready for queries.
type promStore struct {
	db  *tsdb.DB
	dir string
	// scrapeInterval is the recording's median interval between rounds: the
	// "Scrape interval" a Grafana data source for it would be set to.
	scrapeInterval time.Duration
	start, end     time.Time
	engine         *promql.Engine
}

// loadRecording appends every round to a new TSDB as Prometheus's scrape loop
// would: each series gets job="etcd-agent", instance and node (the
// ServiceMonitor's relabeling of the pod's node name) labels; up is 1 or 0;
// a series missing from a scrape, or all of a failed scrape's series, get a
// stale marker, so they end there instead of lingering for the lookback.
func loadRecording(rec Recording) (*promStore, error) {
	dir, err := os.MkdirTemp("", "render-dashboard-tsdb-")
	if err != nil {
		return nil, err
	}
	opts := tsdb.DefaultOptions()
	opts.OutOfOrderTimeWindow = 0
	db, err := tsdb.Open(dir, nil, nil, opts, nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &promStore{db: db, dir: dir, start: rec[0].T, end: rec[len(rec)-1].T, scrapeInterval: medianInterval(rec)}
	s.engine = promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: lookbackDelta,
		EnableAtModifier: true, EnableNegativeOffset: true})
	if err := s.append(rec); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *promStore) append(rec Recording) error {
	app := s.db.Appender(context.Background())
	prev := map[string]map[string]labels.Labels{} // node -> series key -> labels, of its last scrape
	for _, r := range rec {
		ts := r.T.UnixMilli()
		for _, node := range rec.nodes() {
			sc := r.Nodes[node]
			if sc == nil {
				continue // not scraped in this round at all
			}
			target := map[string]string{"job": scrapeJob, "instance": node, "node": node}
			up := 0.0
			if sc.Up {
				up = 1
			}
			if _, err := app.Append(0, seriesLabels("up", nil, target), ts, up); err != nil {
				return err
			}
			cur := map[string]labels.Labels{}
			if sc.Up {
				for _, smp := range sc.Samples {
					ls := seriesLabels(smp.Name, smp.Labels, target)
					cur[ls.String()] = ls
					if _, err := app.Append(0, ls, ts, smp.Value); err != nil {
						return fmt.Errorf("%s at %s: %w", ls, r.T, err)
					}
				}
			}
			for k, ls := range prev[node] {
				if _, ok := cur[k]; !ok {
					if _, err := app.Append(0, ls, ts, math.Float64frombits(value.StaleNaN)); err != nil {
						return err
					}
				}
			}
			prev[node] = cur
		}
	}
	return app.Commit()
}

func seriesLabels(name string, ls, target map[string]string) labels.Labels {
	b := labels.NewScratchBuilder(len(ls) + len(target) + 1)
	b.Add(labels.MetricName, name)
	for k, v := range ls {
		if _, clash := target[k]; clash {
			// honor_labels is false: a scraped label that clashes with a
			// target label is kept as exported_<name>.
			k = "exported_" + k
		}
		b.Add(k, v)
	}
	for k, v := range target {
		b.Add(k, v)
	}
	b.Sort()
	return b.Labels()
}

func medianInterval(rec Recording) time.Duration {
	var ds []time.Duration
	for i := 1; i < len(rec); i++ {
		ds = append(ds, rec[i].T.Sub(rec[i-1].T))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	d := ds[len(ds)/2].Round(time.Second)
	return max(d, time.Second)
}

func (s *promStore) Close() {
	s.db.Close()
	os.RemoveAll(s.dir)
}

// rangeQuery evaluates expr from start to end every step (what Grafana's
// time series and state timeline panels ask Prometheus for).
func (s *promStore) rangeQuery(expr string, start, end time.Time, step time.Duration) (promql.Matrix, error) {
	q, err := s.engine.NewRangeQuery(context.Background(), s.db, nil, expr, start, end, step)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Matrix()
}

// instantQuery evaluates expr at t (a panel's target with "instant": true).
func (s *promStore) instantQuery(expr string, t time.Time) (promql.Vector, error) {
	q, err := s.engine.NewInstantQuery(context.Background(), s.db, nil, expr, t)
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Vector()
}

// grafanaRange is what Grafana knows when it sends a panel's queries: the
// dashboard's time range, the panel's width in pixels (its maxDataPoints) and
// the data source's scrape interval.
type grafanaRange struct {
	from, to       time.Time
	maxDataPoints  int
	scrapeInterval time.Duration
}

// interval is Grafana's $__interval, also the step of a range query:
// (to - from) / maxDataPoints rounded to a round interval, and never below
// the data source's scrape interval (its "min interval").
func (g grafanaRange) interval() time.Duration {
	raw := g.to.Sub(g.from) / time.Duration(max(g.maxDataPoints, 1))
	return max(roundInterval(raw), g.scrapeInterval)
}

// rateInterval is Grafana's $__rate_interval for Prometheus:
// max($__interval + scrape interval, 4 * scrape interval).
func (g grafanaRange) rateInterval() time.Duration {
	return max(g.interval()+g.scrapeInterval, 4*g.scrapeInterval)
}

// roundInterval rounds up to one of Grafana's round intervals (a
// simplification of its kbn.roundInterval, which rounds to the nearest).
func roundInterval(d time.Duration) time.Duration {
	for _, r := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
		100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second,
		10 * time.Second, 15 * time.Second, 20 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute,
		10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour} {
		if d <= r {
			return r
		}
	}
	return d.Round(time.Hour)
}

// promDuration writes d as a PromQL duration (whole milliseconds).
func promDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

var grafanaVar = regexp.MustCompile(`\$(\w+)|\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]`)

// substitute replaces Grafana's variables in expr as Grafana does before it
// sends the query to Prometheus:
//   - $__interval, $__rate_interval, $__range: durations as above (Grafana
//     writes $__range as whole seconds, e.g. "64s"); $__range_s and
//     $__range_ms as numbers; $__interval_ms likewise;
//   - a dashboard variable (e.g. $node) with "All" selected, as the shipped
//     dashboard loads: its allValue (".*" for $node), unescaped, as Grafana
//     does for a custom all value.
//
// Any other variable is an error: the expression would reach Prometheus with
// a "$" it cannot parse.
func (g grafanaRange) substitute(expr string, vars []dashboardVar) (string, error) {
	rng := g.to.Sub(g.from)
	var bad []string
	out := grafanaVar.ReplaceAllStringFunc(expr, func(m string) string {
		sm := grafanaVar.FindStringSubmatch(m)
		name := sm[1] + sm[2] + sm[3]
		switch name {
		case "__interval":
			return promDuration(g.interval())
		case "__interval_ms":
			return strconv.FormatInt(g.interval().Milliseconds(), 10)
		case "__rate_interval":
			return promDuration(g.rateInterval())
		case "__range":
			return strconv.FormatInt(int64(math.Round(rng.Seconds())), 10) + "s"
		case "__range_s":
			return strconv.FormatInt(int64(math.Round(rng.Seconds())), 10)
		case "__range_ms":
			return strconv.FormatInt(rng.Milliseconds(), 10)
		}
		for _, v := range vars {
			if v.Name == name {
				if v.IncludeAll && v.AllValue != "" {
					return v.AllValue
				}
				bad = append(bad, m+" (no allValue)")
				return m
			}
		}
		bad = append(bad, m)
		return m
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("variables this renderer cannot substitute: %s", strings.Join(bad, ", "))
	}
	if _, err := promParser.ParseExpr(out); err != nil {
		return "", fmt.Errorf("%s: %w", out, err)
	}
	return out, nil
}

var legendRef = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// legendName is Grafana's series name: the target's legendFormat with
// {{label}} replaced, or the series' labels when there is none.
func legendName(format string, ls labels.Labels) string {
	if format == "" || format == "__auto" {
		return ls.String()
	}
	return legendRef.ReplaceAllStringFunc(format, func(m string) string {
		return ls.Get(legendRef.FindStringSubmatch(m)[1])
	})
}

// promParser is the parser the engine uses by default (Prometheus's own
// defaults: no experimental functions).
var promParser = parser.NewParser(parser.Options{})
