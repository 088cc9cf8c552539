package agent

import (
	"context"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
)

// pipeline is the agent's one-way flow, stage by stage: the watchdog
// observes, the Assessor says what an observation means for the member
// (state, learners' clocks), the decision core decides (package plan, in
// the healer), and the exporters report what was seen and done. No stage
// reaches back into an earlier one.
type pipeline struct {
	wd        *watchdog.Watchdog
	assessor  *memberstate.Assessor
	exporters []exporter
	pins      *pinner
	watch     *loopWatch // nil: none (tests)
}

// exporter consumes each assessed result: metrics, the status file, the
// Node. recovering: the result was taken by the healer mid-recovery.
type exporter interface {
	export(r memberstate.Result, recovering bool)
}

// assess is the second stage: one observation, in time order.
func (p *pipeline) assess(o observation.Observation) memberstate.Result {
	return p.assessor.Assess(o, p.wd.SampleGap())
}

// exportAll hands r to every exporter, and the member's identity to the pins.
func (p *pipeline) exportAll(ctx context.Context, r memberstate.Result, recovering bool) {
	p.watch.observed(time.Now())
	for _, e := range p.exporters {
		e.export(r, recovering)
	}
	p.pins.observe(ctx, r.Observation) // a rejoined member's new ID is pinned once it serves
}

// recoveryObserver is the healer's view of the pipeline (heal.Observer): a
// fresh observation, assessed, and exported as taken mid-recovery so that
// metrics and the Node stay live while the healer works.
type recoveryObserver struct{ p *pipeline }

func (o recoveryObserver) Observe(ctx context.Context, now time.Time) memberstate.Result {
	r := o.p.assess(o.p.wd.Observe(ctx, now))
	o.p.exportAll(ctx, r, true)
	return r
}
