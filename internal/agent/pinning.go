package agent

import (
	"context"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
)

// pinner keeps the member's pin (plan.NextPin decides when it moves) in the
// state dir and on the Node. The state dir is written first: it is what
// the start gate reads when the API is down.
type pinner struct {
	stateDir, member, node string
	kc                     kubernetes.Interface // nil: state dir only
	log                    *zap.Logger

	mu         sync.Mutex
	pin        pin.Pin
	nodeBehind bool // the Node's copy still needs writing
	nodeTried  time.Time
}

// nodeRetryEvery spaces out Node writes while the API is away, so that a
// down API does not slow every observation by a request timeout.
const nodeRetryEvery = 30 * time.Second

// newPinner loads the state dir's pin, else adopts the Node's (a node
// reinstalled with an empty state dir still knows its member existed).
// An unreadable pin is an error: the agent must not forget a member.
func newPinner(ctx context.Context, stateDir, member, node string, kc kubernetes.Interface, log *zap.Logger) (*pinner, error) {
	p := &pinner{stateDir: stateDir, member: member, node: node, kc: kc, log: log}
	cur, ok, err := pin.Load(stateDir, member)
	if err != nil {
		return nil, err
	}
	if ok {
		p.pin, p.nodeBehind = cur, kc != nil && node != ""
		return p, nil
	}
	if kc == nil || node == "" {
		return p, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	np, ok, err := nodereport.ReadPin(rctx, kc, node, member)
	switch {
	case err != nil:
		log.Warn("the Node's pin could not be read; the member counts as never seen until it serves", zap.Error(err))
	case ok:
		if err := pin.Save(stateDir, np); err != nil {
			return nil, err
		}
		log.Warn("adopted the Node's pin: the state dir had none (a reinstalled node?)", zap.String("pin", np.String()))
		p.pin = np
	}
	return p, nil
}

// ClusterID is the pinned cluster ID (0 before the member was seen serving).
func (p *pinner) ClusterID() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return uint64(p.pin.ClusterID)
}

// Current is the pin now.
func (p *pinner) Current() pin.Pin {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pin
}

// observe moves the pin on when the observation says so, and writes it.
func (p *pinner) observe(ctx context.Context, o observation.Observation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next, changed := plan.NextPin(p.pin, p.member, o, o.At)
	if changed {
		if err := pin.Save(p.stateDir, next); err != nil {
			p.log.Error("could not record the member's pin in the state dir; retrying on the next observation", zap.Error(err))
			return
		}
		p.log.Info("member pinned", zap.String("pin", next.String()), zap.String("was", p.pin.String()))
		p.pin, p.nodeBehind = next, p.kc != nil && p.node != ""
	}
	if !p.nodeBehind || (!changed && time.Since(p.nodeTried) < nodeRetryEvery) {
		return
	}
	p.nodeTried = time.Now()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := nodereport.WritePin(rctx, p.kc, p.node, p.pin); err != nil {
		p.log.Warn("could not record the member's pin on the Node; retrying on the next observation", zap.Error(err))
		return
	}
	p.nodeBehind = false
}
