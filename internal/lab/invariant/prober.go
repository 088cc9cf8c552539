package invariant

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// QuorumLossThreshold is how long linearizable reads may fail in a row before
// it counts as lost quorum (a leader election is shorter).
const QuorumLossThreshold = 2 * time.Second

// Outage is a window in which every linearizable read failed.
type Outage struct {
	From, To time.Time
	LastErr  string
}

// Duration of the outage.
func (o Outage) Duration() time.Duration { return o.To.Sub(o.From) }

// Prober does a linearizable read every interval and records every window in
// which they all failed.
type Prober struct {
	probe   func(context.Context) error
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	outages []Outage
	probes  int
}

// StartProber probes through cli (use a client for every member's URL).
func StartProber(ctx context.Context, cli *clientv3.Client, interval time.Duration) *Prober {
	return StartProbing(ctx, func(ctx context.Context) error {
		_, err := cli.Get(ctx, "health-probe")
		return err
	}, interval)
}

// StartProbing calls probe (given a one-second deadline) every interval
// and records every window in which it failed.
func StartProbing(ctx context.Context, probe func(context.Context) error, interval time.Duration) *Prober {
	pctx, cancel := context.WithCancel(ctx)
	p := &Prober{probe: probe, cancel: cancel, done: make(chan struct{})}
	go p.loop(pctx, interval)
	return p
}

func (p *Prober) loop(ctx context.Context, interval time.Duration) {
	defer close(p.done)
	var cur *Outage
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		start := time.Now()
		err := p.probe(rctx)
		cancel()
		if ctx.Err() != nil { // stopped mid-probe: that failure is ours, not the cluster's
			err = nil
		}
		p.mu.Lock()
		p.probes++
		switch {
		case err != nil && cur == nil:
			cur = &Outage{From: start, To: time.Now(), LastErr: err.Error()}
		case err != nil:
			cur.To, cur.LastErr = time.Now(), err.Error()
		case cur != nil:
			cur.To = start
			p.outages = append(p.outages, *cur)
			cur = nil
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			if cur != nil {
				p.mu.Lock()
				p.outages = append(p.outages, *cur)
				p.mu.Unlock()
			}
			return
		case <-t.C:
		}
	}
}

// Stop ends probing and returns every outage seen and the number of probes.
func (p *Prober) Stop() ([]Outage, int) {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Outage(nil), p.outages...), p.probes
}
