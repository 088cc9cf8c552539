package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series of a scrape, as recorded: a summary or histogram is
// recorded as its _sum and _count series (the dashboard reads no buckets).
type Sample struct {
	Name   string            `json:"n"`
	Labels map[string]string `json:"l,omitempty"`
	Value  float64           `json:"v"`
}

// parseText reads a /metrics response in the Prometheus text format with
// prometheus/common's expfmt, keeping the series whose name has prefix.
func parseText(r io.Reader, prefix string) ([]Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(families))
	for name := range families {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []Sample
	for _, name := range names {
		mf := families[name]
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(suffix string, v float64) {
				out = append(out, Sample{Name: name + suffix, Labels: labels, Value: v})
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add("", m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add("", m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				add("", m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				add("_sum", m.GetHistogram().GetSampleSum())
				add("_count", float64(m.GetHistogram().GetSampleCount()))
			case dto.MetricType_SUMMARY:
				add("_sum", m.GetSummary().GetSampleSum())
				add("_count", float64(m.GetSummary().GetSampleCount()))
			default:
				return nil, fmt.Errorf("%s: metric type %s is not recorded", name, mf.GetType())
			}
		}
	}
	return out, nil
}
