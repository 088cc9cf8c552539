package lease

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
)

// startRenewer starts the background renewal unless it already runs (a
// second TryAcquire by the holder only republishes its info). It outlives
// ctx on purpose: TryAcquire's context often covers one call, the hold lasts
// until Release.
func (l *Lease) startRenewer(ctx context.Context) {
	l.stateMu.Lock()
	defer l.stateMu.Unlock()
	if l.stopRenew != nil {
		return
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	l.stopRenew, l.renewDone = cancel, done
	go l.renewLoop(rctx, done)
}

// stopRenewer stops the renewer and waits for it, so that no renewal lands
// after Release has cleared the Lease.
func (l *Lease) stopRenewer() {
	l.stateMu.Lock()
	cancel, done := l.stopRenew, l.renewDone
	l.stopRenew, l.renewDone = nil, nil
	l.stateMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// renewLoop renews every TTL/3, which leaves two more tries before the
// Lease expires when one fails. API errors are retried; finding the Lease
// taken (another holder, or freed by hand) ends the hold for good.
func (l *Lease) renewLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(l.cfg.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := l.renewOnce(ctx, done)
		switch {
		case err == nil:
		case errors.Is(err, ErrNotHeld):
			l.cfg.Log.Error("recovery lease lost: stop changing etcd membership", zap.Error(err))
			return
		case ctx.Err() != nil:
			return
		default:
			l.cfg.Log.Warn("renewing the recovery lease failed; retrying", zap.Error(err),
				zap.Bool("stillValid", l.Holding()))
		}
	}
}

// renewOnce renews the Lease; when it finds the Lease taken it marks the
// hold lost before letting go of opMu, so that a TryAcquire waiting for
// opMu is not undone by this late verdict.
func (l *Lease) renewOnce(ctx context.Context, done chan<- struct{}) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	err := l.writeLocked(ctx, l.info, false)
	if errors.Is(err, ErrNotHeld) {
		l.stateMu.Lock()
		l.held = false
		if l.renewDone == done {
			l.stopRenew() // our own context: the loop ends after this
			l.stopRenew, l.renewDone = nil, nil
		}
		l.stateMu.Unlock()
	}
	return err
}
