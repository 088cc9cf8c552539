package main

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"time"
)

const (
	imageWidth = 1600
	pad        = 12
	headerH    = 64
	rowUnit    = 34
)

type point struct {
	t time.Time
	v float64
}

// panelSeries is one series a panel's query returned, named as Grafana
// names it (the target's legendFormat).
type panelSeries struct {
	name   string
	points []point // a range query's points, or the one of an instant query
}

// panelData is what Prometheus answered for a panel, and the step asked for.
type panelData struct {
	series []panelSeries
	step   time.Duration
	exprs  []string // as sent, variables substituted
}

// evaluatePanel sends each of p's queries to Prometheus's engine as Grafana
// would: range queries over the dashboard's range at $__interval, or an
// instant query at its end for an "instant" target.
func evaluatePanel(s *promStore, g grafanaRange, vars []dashboardVar, p panel) (panelData, error) {
	step := g.interval()
	d := panelData{step: step}
	// Grafana aligns a range query's start and end to the step.
	start := time.UnixMilli(g.from.UnixMilli() / step.Milliseconds() * step.Milliseconds())
	end := time.UnixMilli(g.to.UnixMilli() / step.Milliseconds() * step.Milliseconds())
	for _, tg := range p.Targets {
		if tg.Hide {
			continue
		}
		expr, err := g.substitute(tg.Expr, vars)
		if err != nil {
			return d, fmt.Errorf("panel %q: %w", p.Title, err)
		}
		d.exprs = append(d.exprs, expr)
		var got []panelSeries
		if tg.Instant {
			vec, err := s.instantQuery(expr, g.to)
			if err != nil {
				return d, fmt.Errorf("panel %q: %s: %w", p.Title, expr, err)
			}
			for _, smp := range vec {
				got = append(got, panelSeries{name: legendName(tg.LegendFormat, smp.Metric),
					points: []point{{time.UnixMilli(smp.T).UTC(), smp.F}}})
			}
		} else {
			mat, err := s.rangeQuery(expr, start, end, step)
			if err != nil {
				return d, fmt.Errorf("panel %q: %s: %w", p.Title, expr, err)
			}
			for _, ser := range mat {
				ps := panelSeries{name: legendName(tg.LegendFormat, ser.Metric)}
				for _, fp := range ser.Floats {
					ps.points = append(ps.points, point{time.UnixMilli(fp.T).UTC(), fp.F})
				}
				got = append(got, ps)
			}
		}
		sort.SliceStable(got, func(i, j int) bool { return got[i].name < got[j].name })
		d.series = append(d.series, got...)
	}
	return d, nil
}

// renderDashboard draws every panel of d from the recording, each from what
// its own queries return.
func renderDashboard(d dashboard, rec Recording, source string) (*canvas, error) {
	s, err := loadRecording(rec)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	maxRow := 0
	for _, p := range d.Panels {
		if _, ok := panelDrawers[p.Type]; !ok {
			return nil, fmt.Errorf("panel %q: type %q is not drawn by hack/render-dashboard", p.Title, p.Type)
		}
		maxRow = max(maxRow, p.GridPos.Y+p.GridPos.H)
	}
	h := headerH + maxRow*rowUnit + pad
	c := newCanvas(imageWidth, h, colBackground)
	t0, t1 := s.start, s.end
	c.text(pad, 14, d.Title, 3, colText)
	sub := fmt.Sprintf("%s - %s UTC (%s), %d agents, %d scrapes each. Rendered by hack/render-dashboard: the dashboard's PromQL over %s",
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
		g := grafanaRange{from: t0, to: t1, maxDataPoints: b.x1 - b.x0, scrapeInterval: s.scrapeInterval}
		data, err := evaluatePanel(s, g, d.Templating.List, p)
		if err != nil {
			return nil, err
		}
		items := panelDrawers[p.Type](c, b, p, data)
		c.legend(b.x0, b.y1+18, x1-10, items)
	}
	return c, nil
}

// panelDrawers draw a panel's data the way Grafana's panel of that type
// shows it, from the panel's field config.
var panelDrawers = map[string]func(c *canvas, b box, p panel, d panelData) []legendItem{
	"state-timeline": stateTimeline,
	"timeseries":     timeSeries,
	"bargauge":       barGauge,
}

// stateTimeline draws one row per series; each point's value, through the
// panel's value mappings, colors the span up to the next step.
func stateTimeline(c *canvas, b box, p panel, d panelData) []legendItem {
	f := p.FieldConfig.Defaults
	left, need := b.x0-70+10, 0
	for _, s := range d.series {
		need = max(need, textWidth(s.name, 1)+8)
	}
	b.x0 = max(b.x0, left+need)
	c.timeAxis(b)
	if len(d.series) == 0 {
		c.text(b.x0+10, b.y0+10, "no data", 2, colMuted)
		return nil
	}
	rowH := float64(b.y1-b.y0) / float64(len(d.series))
	seen := map[string]bool{}
	unmapped := false
	for i, s := range d.series {
		ry0 := b.y0 + int(float64(i)*rowH) + 2
		ry1 := b.y0 + int(float64(i+1)*rowH) - 2
		c.text(b.x0-8-textWidth(s.name, 1), (ry0+ry1)/2-3, s.name, 1, colText)
		c.fill(b.x0, ry0, b.x1, ry1, colNoData)
		for j, pt := range s.points {
			next := pt.t.Add(d.step)
			if j+1 < len(s.points) && s.points[j+1].t.Before(next) {
				next = s.points[j+1].t
			}
			col := colGrey
			if m, ok := f.mapValue(pt.v); ok {
				col, seen[m.text] = m.color, true
				if col.A == 0 { // transparent: the panel shows through
					col = colPanel
				}
			} else {
				unmapped = true
			}
			c.fill(max(b.x(pt.t), b.x0), ry0, min(b.x(next)+1, b.x1), ry1, col)
		}
	}
	var items []legendItem
	for _, m := range f.mappings() {
		if seen[m.text] && m.color.A != 0 {
			items = append(items, legendItem{m.text, m.color})
		}
	}
	if unmapped {
		items = append(items, legendItem{"unmapped value", colGrey})
	}
	return append(items, legendItem{"no data", colNoData})
}

// timeSeries draws lines (steps with lineInterpolation stepAfter), or
// stacked bars with drawStyle bars, with the panel's thresholds as areas or
// lines.
func timeSeries(c *canvas, b box, p panel, d panelData) []legendItem {
	f := p.FieldConfig.Defaults
	bars := f.Custom.DrawStyle == "bars"
	stacked := bars && f.Custom.Stacking.Mode == "normal"
	lo, hi := math.Inf(1), math.Inf(-1)
	if stacked {
		sums := map[time.Time]float64{}
		for _, s := range d.series {
			for _, pt := range s.points {
				sums[pt.t] += pt.v
			}
		}
		for _, v := range sums {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	} else {
		for _, s := range d.series {
			for _, pt := range s.points {
				lo, hi = math.Min(lo, pt.v), math.Max(hi, pt.v)
			}
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	lo = math.Min(lo, 0)
	if f.Min != nil {
		lo = *f.Min
	}
	hi += math.Max((hi-lo)*0.1, 0.5)
	if f.Max != nil {
		hi = *f.Max
	}
	if hi <= lo {
		hi = lo + 1
	}
	yOf := func(v float64) int { return b.y1 - int(math.Round((v-lo)/(hi-lo)*float64(b.y1-b.y0))) }
	var items []legendItem
	steps := f.Thresholds.Steps
	switch f.Custom.ThresholdsStyle.Mode {
	case "area":
		for i, st := range steps {
			from, to := lo, hi
			if st.Value != nil {
				from = math.Max(*st.Value, lo)
			}
			if i+1 < len(steps) && steps[i+1].Value != nil {
				to = math.Min(*steps[i+1].Value, hi)
			}
			if to > from {
				col := grafanaColor(st.Color)
				col.A = 0x30
				c.fill(b.x0, yOf(to), b.x1, yOf(from), col)
			}
		}
	case "line":
		for _, st := range steps {
			if st.Value != nil && *st.Value > lo && *st.Value < hi {
				c.dashed(b.x0, b.x1, yOf(*st.Value), grafanaColor(st.Color))
				items = append(items, legendItem{"threshold " + f.format(*st.Value), grafanaColor(st.Color)})
			} else if st.Value != nil {
				msg := "threshold " + f.format(*st.Value) + ": off scale"
				c.text(b.x1-textWidth(msg, 1), b.y0+2, msg, 1, colMuted)
			}
		}
	}
	c.timeAxis(b)
	y := c.valueAxis(b, lo, hi, f.axisFormat)
	if len(d.series) == 0 {
		c.text(b.x0+10, b.y0+10, "no data", 2, colMuted)
	}
	base := map[time.Time]float64{}
	for i, s := range d.series {
		col := p.seriesColor(s.name, i)
		for j, pt := range s.points {
			if bars {
				x0, x1 := b.x(pt.t.Add(-d.step/2))+1, b.x(pt.t.Add(d.step/2))-1
				x0, x1 = max(x0, b.x0), min(max(x1, x0+1), b.x1)
				from := 0.0
				if stacked {
					from = base[pt.t]
					base[pt.t] += pt.v
				}
				if pt.v != 0 {
					c.fill(x0, y(from+pt.v), x1, y(from), col)
				}
				continue
			}
			if j == 0 {
				continue
			}
			p0 := s.points[j-1]
			if pt.t.Sub(p0.t) > d.step { // no point in between: a gap
				continue
			}
			x0, x1 := b.x(p0.t), b.x(pt.t)
			if f.Custom.LineInterpolation == "stepAfter" {
				c.line(x0, y(p0.v), x1, y(p0.v), col, 2)
				c.line(x1, y(p0.v), x1, y(pt.v), col, 2)
			} else {
				c.line(x0, y(p0.v), x1, y(pt.v), col, 2)
			}
		}
		items = append(items, legendItem{s.name, col})
	}
	return items
}

// barGauge draws one horizontal bar per series, at its last value.
func barGauge(c *canvas, b box, p panel, d panelData) []legendItem {
	f := p.FieldConfig.Defaults
	type bar struct {
		name string
		v    float64
		col  color.RGBA
	}
	var bars []bar
	for i, s := range d.series {
		if len(s.points) == 0 {
			continue
		}
		v := s.points[len(s.points)-1].v
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue // Grafana shows no bar for NaN
		}
		bars = append(bars, bar{s.name, v, p.seriesColor(s.name, i)})
	}
	if len(bars) == 0 {
		c.text(b.x0+10, b.y0+10, "no data", 2, colMuted)
		return nil
	}
	lo, hi := 0.0, 0.0
	if f.Min != nil {
		lo = *f.Min
	}
	for _, br := range bars {
		hi = math.Max(hi, br.v)
	}
	if f.Max != nil {
		hi = *f.Max
	}
	if hi <= lo {
		hi = lo + 1
	}
	rowH := float64(b.y1-b.y0+30) / float64(len(bars))
	labelW := 0
	for _, br := range bars {
		labelW = max(labelW, textWidth(br.name, 1))
	}
	x0 := b.x0 - 60 + labelW + 10
	valW := textWidth("00.00 min", 1) + 10
	for i, br := range bars {
		ry0 := b.y0 + int(float64(i)*rowH) + 1
		ry1 := b.y0 + int(float64(i+1)*rowH) - 2
		c.text(b.x0-60, (ry0+ry1)/2-3, br.name, 1, colText)
		c.fill(x0, ry0, b.x1-valW, ry1, colNoData)
		w := int((br.v - lo) / (hi - lo) * float64(b.x1-valW-x0))
		c.fill(x0, ry0, x0+max(w, 1), ry1, br.col)
		c.text(b.x1-valW+6, (ry0+ry1)/2-3, f.format(br.v), 1, colText)
	}
	return nil
}
