package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
)

// dashboard is the part of the Grafana dashboard JSON the renderer reads:
// each panel's title, type, place on Grafana's 24-column grid, and queries
// (printed under the title, to show what the panel stands for).
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		GridPos struct {
			X, Y, W, H int
		} `json:"gridPos"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(path string) (dashboard, error) {
	var d dashboard
	b, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// panelFunc draws one panel's data into its plot area; it returns the
// legend entries.
type panelFunc func(c *canvas, b box, rec Recording) []legendItem

// panelFuncs compute each dashboard panel from the recording the way its
// PromQL does. A dashboard panel without an entry here is an error, so the
// PNG and the dashboard cannot drift apart.
var panelFuncs = map[string]panelFunc{
	"Member state per node":          memberStatePanel,
	"Quorum margin":                  quorumMarginPanel,
	"Data dir status per node":       dataDirPanel,
	"Voting members":                 votingPanel,
	"Recovery in progress and Lease": inProgressPanel,
	"Recovery phase durations":       phaseDurationsPanel,
	"Recoveries by result":           recoveriesPanel,
	"Refusals by reason":             refusalsPanel,
	"Learner lag":                    learnerLagPanel,
	"Snapshot stream":                snapshotPanel,
}

const (
	imageWidth = 1600
	pad        = 12
	headerH    = 64
	rowUnit    = 34
)

// renderDashboard draws every panel of d from rec.
func renderDashboard(d dashboard, rec Recording, source string) (*canvas, error) {
	maxRow := 0
	for _, p := range d.Panels {
		if _, ok := panelFuncs[p.Title]; !ok {
			return nil, fmt.Errorf("panel %q has no renderer in hack/render-dashboard", p.Title)
		}
		maxRow = max(maxRow, p.GridPos.Y+p.GridPos.H)
	}
	h := headerH + maxRow*rowUnit + pad
	c := newCanvas(imageWidth, h, colBackground)
	t0, t1 := rec[0].T, rec[len(rec)-1].T
	c.text(pad, 14, d.Title, 3, colText)
	sub := fmt.Sprintf("%s - %s UTC (%s), %d agents, %d scrapes each. Rendered by hack/render-dashboard from %s",
		t0.Format("2006-01-02 15:04:05"), t1.Format("15:04:05"), t1.Sub(t0).Round(time.Second), len(rec.nodes()), len(rec), source)
	c.text(pad, 44, sub, 1, colMuted)
	uw := float64(imageWidth-2*pad) / 24
	for _, p := range d.Panels {
		x0 := pad + int(float64(p.GridPos.X)*uw)
		x1 := pad + int(float64(p.GridPos.X+p.GridPos.W)*uw) - 8
		y0 := headerH + p.GridPos.Y*rowUnit
		y1 := y0 + p.GridPos.H*rowUnit - 8
		c.fill(x0, y0, x1, y1, colPanel)
		c.border(x0, y0, x1, y1, colBorder)
		c.text(x0+10, y0+9, p.Title, 2, colText)
		b := box{x0: x0 + 70, y0: y0 + 34, x1: x1 - 18, y1: y1 - 38, t0: t0, t1: t1}
		items := panelFuncs[p.Title](c, b, rec)
		c.legend(b.x0, b.y1+18, x1-10, items)
	}
	return c, nil
}

// --- state timelines -------------------------------------------------------

var memberStateColors = map[string]color.RGBA{"healthy": colGreen, "degraded": colYellow, "down": colOrange,
	"lost": colRed, "recovering": colBlue, "learner": colPurple}
var memberStateOrder = []string{"healthy", "degraded", "down", "lost", "recovering", "learner"}

var dataDirColors = map[string]color.RGBA{"ok": colGreen, "missing": colRed, "empty": colOrange, "corrupt": colDarkRed,
	"foreign": colPurple, "in-use": colBlue}
var dataDirOrder = []string{"ok", "missing", "empty", "corrupt", "foreign", "in-use"}

type timelineRow struct {
	name  string
	state func(r Round) (string, bool)
}

// timeline draws one row per entry; each round's state colors the span up
// to the next round (Grafana's state timeline); "" or no data stays empty.
func timeline(c *canvas, b box, rec Recording, rows []timelineRow, colors map[string]color.RGBA, order []string) []legendItem {
	// Row names left of the plot: make room for the longest.
	left, need := b.x0-70+10, 0
	for _, row := range rows {
		need = max(need, textWidth(row.name, 1)+8)
	}
	b.x0 = max(b.x0, left+need)
	c.timeAxis(b)
	rowH := float64(b.y1-b.y0) / float64(len(rows))
	seen := map[string]bool{}
	for i, row := range rows {
		ry0 := b.y0 + int(float64(i)*rowH) + 2
		ry1 := b.y0 + int(float64(i+1)*rowH) - 2
		c.text(b.x0-8-textWidth(row.name, 1), (ry0+ry1)/2-3, row.name, 1, colText)
		c.fill(b.x0, ry0, b.x1, ry1, colNoData)
		for j := 0; j < len(rec)-1; j++ {
			st, ok := row.state(rec[j])
			col, known := colors[st]
			if !ok || !known {
				continue
			}
			seen[st] = true
			c.fill(b.x(rec[j].T), ry0, b.x(rec[j+1].T)+1, ry1, col)
		}
	}
	var items []legendItem
	for _, s := range order {
		if seen[s] {
			items = append(items, legendItem{s, colors[s]})
		}
	}
	return append(items, legendItem{"no data", colNoData})
}

func memberStatePanel(c *canvas, b box, rec Recording) []legendItem {
	var rows []timelineRow
	for _, n := range rec.nodes() {
		rows = append(rows, timelineRow{n, func(r Round) (string, bool) { return r.Nodes[n].oneHot("etcd_agent_member_state", "state") }})
	}
	return timeline(c, b, rec, rows, memberStateColors, memberStateOrder)
}

func dataDirPanel(c *canvas, b box, rec Recording) []legendItem {
	var rows []timelineRow
	for _, n := range rec.nodes() {
		rows = append(rows, timelineRow{n, func(r Round) (string, bool) { return r.Nodes[n].oneHot("etcd_agent_data_dir_status", "status") }})
	}
	return timeline(c, b, rec, rows, dataDirColors, dataDirOrder)
}

func inProgressPanel(c *canvas, b box, rec Recording) []legendItem {
	var rows []timelineRow
	yesNo := func(n, metric string) func(Round) (string, bool) {
		return func(r Round) (string, bool) {
			v, ok := r.Nodes[n].value(metric, nil)
			if !ok {
				return "", false
			}
			if v == 1 {
				return metric, true
			}
			return "no", true
		}
	}
	for _, n := range rec.nodes() {
		rows = append(rows, timelineRow{n + " recovering", yesNo(n, "etcd_agent_recovery_in_progress")},
			timelineRow{n + " holds Lease", yesNo(n, "etcd_agent_lease_held")})
	}
	colors := map[string]color.RGBA{"etcd_agent_recovery_in_progress": colBlue, "etcd_agent_lease_held": colPurple, "no": colPanel}
	items := timeline(c, b, rec, rows, colors, nil)
	return append([]legendItem{{"recovering", colBlue}, {"holds the Lease", colPurple}}, items...)
}

// --- time series -------------------------------------------------------------

type point struct {
	t time.Time
	v float64
}

type series struct {
	name   string
	color  color.RGBA
	points []point
}

// lines draws series over [lo, hi] (auto when lo == hi); step draws them as
// steps (a gauge holds its value until the next scrape).
func lines(c *canvas, b box, ss []series, lo, hi float64, step bool, format func(float64) string, bands func(y func(float64) int)) []legendItem {
	if lo == hi {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, s := range ss {
			for _, p := range s.points {
				lo, hi = math.Min(lo, p.v), math.Max(hi, p.v)
			}
		}
		if math.IsInf(lo, 0) {
			lo, hi = 0, 1
		}
		lo = math.Min(lo, 0)
		hi = hi + (hi-lo)*0.1
		if hi <= lo {
			hi = lo + 1
		}
	}
	if bands != nil {
		y := func(v float64) int {
			return b.y1 - int(math.Round((v-lo)/(hi-lo)*float64(b.y1-b.y0)))
		}
		bands(y)
	}
	c.timeAxis(b)
	y := c.valueAxis(b, lo, hi, format)
	var items []legendItem
	for _, s := range ss {
		for i := 1; i < len(s.points); i++ {
			p0, p1 := s.points[i-1], s.points[i]
			if p1.t.Sub(p0.t) > 5*time.Second { // a gap in the scrapes: no line
				continue
			}
			x0, x1 := b.x(p0.t), b.x(p1.t)
			if step {
				c.line(x0, y(p0.v), x1, y(p0.v), s.color, 2)
				c.line(x1, y(p0.v), x1, y(p1.v), s.color, 2)
			} else {
				c.line(x0, y(p0.v), x1, y(p1.v), s.color, 2)
			}
		}
		items = append(items, legendItem{s.name, s.color})
	}
	return items
}

// perNode collects f(scrape) per node over the recording.
func perNode(rec Recording, f func(*Scrape) (float64, bool)) []series {
	var out []series
	for i, n := range rec.nodes() {
		s := series{name: n, color: colPalette[i%len(colPalette)]}
		for _, r := range rec {
			if v, ok := f(r.Nodes[n]); ok {
				s.points = append(s.points, point{r.T, v})
			}
		}
		out = append(out, s)
	}
	return out
}

func quorumMarginPanel(c *canvas, b box, rec Recording) []legendItem {
	ss := perNode(rec, func(s *Scrape) (float64, bool) { return s.value("etcd_agent_cluster_quorum_margin", nil) })
	hi := 2.0
	for _, s := range ss {
		for _, p := range s.points {
			hi = math.Max(hi, p.v+1)
		}
	}
	bands := func(y func(float64) int) {
		c.fill(b.x0, y(0), b.x1, y(-1.5), color.RGBA{0xf2, 0x49, 0x5c, 0x30})
		c.fill(b.x0, y(1), b.x1, y(0), color.RGBA{0xff, 0x98, 0x30, 0x30})
		c.fill(b.x0, y(hi), b.x1, y(1), color.RGBA{0x73, 0xbf, 0x69, 0x22})
	}
	return lines(c, b, ss, -1.5, hi, true, formatPlain, bands)
}

func votingPanel(c *canvas, b box, rec Recording) []legendItem {
	voting := series{name: "voting", color: colBlue}
	healthy := series{name: "healthy (worst view)", color: colGreen}
	for _, r := range rec {
		vmax, hmin, any := math.Inf(-1), math.Inf(1), false
		for _, s := range r.Nodes {
			v, ok1 := s.value("etcd_agent_cluster_voting_members", nil)
			h, ok2 := s.value("etcd_agent_cluster_healthy_voting_members", nil)
			if ok1 && ok2 {
				vmax, hmin, any = math.Max(vmax, v), math.Min(hmin, h), true
			}
		}
		if any {
			voting.points = append(voting.points, point{r.T, vmax})
			healthy.points = append(healthy.points, point{r.T, hmin})
		}
	}
	hi := 1.0
	for _, p := range voting.points {
		hi = math.Max(hi, p.v+1)
	}
	return lines(c, b, []series{voting, healthy}, 0, hi, true, formatPlain, nil)
}

func learnerLagPanel(c *canvas, b box, rec Recording) []legendItem {
	ss := perNode(rec, func(s *Scrape) (float64, bool) { return s.value("etcd_agent_learner_lag_entries", nil) })
	items := lines(c, b, ss, 0, 0, false, formatPlain, nil)
	// The promotion bound (--max-learner-lag, default 1000), if in range.
	hi := 0.0
	for _, s := range ss {
		for _, p := range s.points {
			hi = math.Max(hi, p.v)
		}
	}
	if hi*1.1 >= 1000 {
		y := b.y1 - int(1000/(hi*1.1)*float64(b.y1-b.y0))
		c.dashed(b.x0, b.x1, y, colRed)
		items = append(items, legendItem{"--max-learner-lag 1000", colRed})
	} else {
		c.text(b.x1-textWidth("max-learner-lag 1000: off scale", 1), b.y0+2, "max-learner-lag 1000: off scale", 1, colMuted)
	}
	return items
}

func snapshotPanel(c *canvas, b box, rec Recording) []legendItem {
	var ss []series
	for i, n := range rec.nodes() {
		s := series{name: n, color: colPalette[i%len(colPalette)]}
		var prev *point
		for _, r := range rec {
			v, ok := r.Nodes[n].value("etcd_agent_snapshot_bytes_total", nil)
			if !ok {
				prev = nil
				continue
			}
			if prev != nil {
				d := v - prev.v
				if d < 0 {
					d = v // counter reset
				}
				s.points = append(s.points, point{r.T, d / r.T.Sub(prev.t).Seconds()})
			}
			prev = &point{r.T, v}
		}
		ss = append(ss, s)
	}
	return lines(c, b, ss, 0, 0, false, formatBytesRate, nil)
}

// --- counters as bars ----------------------------------------------------------

// increases returns, per label value of label and per time bin, the summed
// increase of counter name over the nodes (increase() per $__rate_interval).
func increases(rec Recording, name, label string, bins []time.Time) map[string][]float64 {
	out := map[string][]float64{}
	for _, n := range rec.nodes() {
		last := map[string]float64{} // per series key: last value seen
		bin := 0
		for _, r := range rec {
			for bin < len(bins)-1 && !r.T.Before(bins[bin+1]) {
				bin++
			}
			s := r.Nodes[n]
			if s == nil || !s.Up {
				continue
			}
			for _, smp := range s.Samples {
				if smp.Name != name {
					continue
				}
				k := smp.key()
				prev, seen := last[k]
				last[k] = smp.Value
				d := smp.Value - prev // a series that appears counts from 0
				if seen && d < 0 {
					d = smp.Value // reset
				}
				if d <= 0 {
					continue
				}
				lv := smp.Labels[label]
				if out[lv] == nil {
					out[lv] = make([]float64, len(bins)-1)
				}
				out[lv][min(bin, len(bins)-2)] += d
			}
		}
	}
	return out
}

func timeBins(rec Recording, n int) []time.Time {
	t0, t1 := rec[0].T, rec[len(rec)-1].T
	w := niceDuration(t1.Sub(t0) / time.Duration(n))
	var bins []time.Time
	for t := t0; t.Before(t1); t = t.Add(w) {
		bins = append(bins, t)
	}
	return append(bins, t1)
}

func niceDuration(d time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute} {
		if d <= s {
			return s
		}
	}
	return d.Round(time.Minute)
}

// stackedBars draws one stacked bar per bin.
func stackedBars(c *canvas, b box, bins []time.Time, data map[string][]float64, order []string, colors map[string]color.RGBA) []legendItem {
	hi := 1.0
	for i := 0; i < len(bins)-1; i++ {
		sum := 0.0
		for _, v := range data {
			sum += v[i]
		}
		hi = math.Max(hi, sum)
	}
	c.timeAxis(b)
	y := c.valueAxis(b, 0, hi*1.15, formatPlain)
	for i := 0; i < len(bins)-1; i++ {
		x0, x1 := b.x(bins[i])+1, b.x(bins[i+1])-1
		base := 0.0
		for _, k := range order {
			v := data[k][i]
			if v <= 0 {
				continue
			}
			c.fill(x0, y(base+v), x1, y(base), colors[k])
			base += v
		}
	}
	var items []legendItem
	for _, k := range order {
		items = append(items, legendItem{k, colors[k]})
	}
	return items
}

func recoveriesPanel(c *canvas, b box, rec Recording) []legendItem {
	bins := timeBins(rec, 40)
	data := increases(rec, "etcd_agent_recoveries_total", "result", bins)
	for _, k := range []string{"succeeded", "failed"} {
		if data[k] == nil {
			data[k] = make([]float64, len(bins)-1)
		}
	}
	return stackedBars(c, b, bins, data, []string{"succeeded", "failed"}, map[string]color.RGBA{"succeeded": colGreen, "failed": colRed})
}

func refusalsPanel(c *canvas, b box, rec Recording) []legendItem {
	bins := timeBins(rec, 40)
	data := increases(rec, "etcd_agent_recovery_refusals_total", "reason", bins)
	var order []string
	for k := range data {
		order = append(order, k)
	}
	sort.Strings(order)
	colors := map[string]color.RGBA{}
	for i, k := range order {
		colors[k] = colPalette[(i+1)%len(colPalette)]
	}
	items := stackedBars(c, b, bins, data, order, colors)
	if len(order) == 0 {
		c.text(b.x0+10, b.y0+10, "no refusals in this range", 2, colMuted)
	}
	return items
}

// --- bar gauge ---------------------------------------------------------------

// journalPhases is the order of the recovery's phases (internal/journal).
var journalPhases = []string{"started", "stopped", "snapshotted", "removed", "learner-added", "prepared",
	"member-started", "promoted", "verified", "done"}

func phaseDurationsPanel(c *canvas, b box, rec Recording) []legendItem {
	// increase(sum[$__range]) / increase(count[$__range]), summed over nodes.
	sum, count := map[string]float64{}, map[string]float64{}
	for _, n := range rec.nodes() {
		first, last := map[string]float64{}, map[string]float64{}
		for i, r := range rec {
			s := r.Nodes[n]
			if s == nil || !s.Up {
				continue
			}
			for _, smp := range s.Samples {
				if !strings.HasPrefix(smp.Name, "etcd_agent_recovery_phase_duration_seconds_") {
					continue
				}
				k := smp.key()
				if _, ok := first[k]; !ok {
					first[k] = 0 // appeared on its first observation: counts from 0
					if i == 0 {
						first[k] = smp.Value
					}
				}
				last[k] = smp.Value
			}
		}
		for k, v := range last {
			phase := phaseOf(k)
			inc := v - first[k]
			if strings.Contains(k, "_sum{") {
				sum[phase] += inc
			} else if strings.Contains(k, "_count{") {
				count[phase] += inc
			}
		}
	}
	type bar struct {
		phase string
		v     float64
	}
	var bars []bar
	for p, n := range count {
		if n > 0 {
			bars = append(bars, bar{p, sum[p] / n})
		}
	}
	idx := func(p string) int {
		if i := slices.Index(journalPhases, p); i >= 0 {
			return i
		}
		return len(journalPhases)
	}
	sort.Slice(bars, func(i, j int) bool {
		if idx(bars[i].phase) != idx(bars[j].phase) {
			return idx(bars[i].phase) < idx(bars[j].phase)
		}
		return bars[i].phase < bars[j].phase
	})
	if len(bars) == 0 {
		c.text(b.x0+10, b.y0+10, "no recovery in this range", 2, colMuted)
		return nil
	}
	hi := 0.0
	for _, br := range bars {
		hi = math.Max(hi, br.v)
	}
	rowH := float64(b.y1-b.y0+30) / float64(len(bars))
	labelW := 0
	for _, br := range bars {
		labelW = max(labelW, textWidth(br.phase, 1))
	}
	x0 := b.x0 - 60 + labelW + 10
	valW := textWidth("000 ms", 1) + 10
	for i, br := range bars {
		ry0 := b.y0 + int(float64(i)*rowH) + 1
		ry1 := b.y0 + int(float64(i+1)*rowH) - 2
		c.text(b.x0-60, (ry0+ry1)/2-3, br.phase, 1, colText)
		c.fill(x0, ry0, b.x1-valW, ry1, colNoData)
		w := int(br.v / hi * float64(b.x1-valW-x0))
		c.fill(x0, ry0, x0+max(w, 1), ry1, colBlue)
		lbl := formatSeconds(br.v)
		c.text(b.x1-valW+6, (ry0+ry1)/2-3, lbl, 1, colText)
	}
	return nil
}

// phaseOf extracts the phase label from a series key.
func phaseOf(key string) string {
	i := strings.Index(key, `phase="`)
	if i < 0 {
		return "?"
	}
	rest := key[i+len(`phase="`):]
	return rest[:strings.Index(rest, `"`)]
}
