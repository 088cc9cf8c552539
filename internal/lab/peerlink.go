package lab

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// A slow link into one member (issue 44: the catch-up's ETA is measured on
// bytes that take time to arrive; over loopback a raft snapshot of 1 GiB
// arrives in under 250 ms). With peer proxies, LimitPeerIngress meters the
// bodies of the peer requests that node's proxy forwards to its member:
// raft snapshots and pipeline messages, the bulk a new learner receives.
// Raft stream messages to it travel on the responses of the stream GETs it
// dials to the others, not through its own proxy, and are not metered
// (they are small: heartbeats and appends).

// linkBurst is the most bytes read at once under a limit.
const linkBurst = 256 << 10

// LimitPeerIngress meters the peer request bodies node's member receives to
// bytesPerSecond (0 lifts the limit), until Down.
func (l *Lab) LimitPeerIngress(node string, bytesPerSecond int64) error {
	if l.peers == nil {
		return l.errNoPeerProxy()
	}
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	if bytesPerSecond < 0 {
		return fmt.Errorf("node %s: a negative link rate (%d B/s)", node, bytesPerSecond)
	}
	l.peers.mu.Lock()
	p, ok := l.peers.byURL[n.PeerURL]
	l.peers.mu.Unlock()
	if !ok {
		return fmt.Errorf("node %s: no peer proxy for %s in this process", node, n.PeerURL)
	}
	if bytesPerSecond == 0 {
		p.ingress.Store(nil)
	} else {
		p.ingress.Store(rate.NewLimiter(rate.Limit(bytesPerSecond), linkBurst))
	}
	l.log.Info("fault: peer link rate", zap.String("node", node), zap.Int64("bytesPerSecond", bytesPerSecond))
	return nil
}

// waiter is what a metered body asks before it hands on bytes (a
// *rate.Limiter).
type waiter interface {
	WaitN(ctx context.Context, n int) error
}

// meteredBody hands on at most linkBurst bytes a read, each read once the
// limiter lets that many through.
type meteredBody struct {
	io.ReadCloser
	ctx context.Context
	lim waiter
}

func (b meteredBody) Read(p []byte) (int, error) {
	if len(p) > linkBurst {
		p = p[:linkBurst]
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		if werr := b.lim.WaitN(b.ctx, n); werr != nil {
			return n, errors.Join(werr, err)
		}
	}
	return n, err
}
