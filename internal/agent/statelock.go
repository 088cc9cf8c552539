package agent

// One agent process per state dir: a newcomer's first poll takes what it
// finds there for a killed agent's leftovers (part files, seed streams, a
// backup its journal never took) and removes them, which is right only
// when no other live agent is about to journal them.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// stateLockWait bounds how long a starting agent waits for another one on
// its state dir to exit (a rolling update whose old pod is still ending).
const stateLockWait = time.Minute

// flock is syscall.Flock (a test stands in a filesystem without locks).
var flock = syscall.Flock

// lockStateDir takes an exclusive lock on dir (flock on dir/.agent.lock,
// released when the process exits, also by SIGKILL), waiting at most wait
// for another holder, with a log line. unlock releases it.
func lockStateDir(ctx context.Context, dir string, wait time.Duration, log *zap.Logger) (unlock func(), err error) {
	p := filepath.Join(dir, ".agent.lock")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir lock %s: %w", p, err)
	}
	deadline := time.Now().Add(wait)
	said := false
	for {
		err := flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			// Also a filesystem without locks (ENOLCK, EOPNOTSUPP): fail
			// closed, the start's removal of a dead agent's leftovers is
			// safe only with one live agent per state dir.
			f.Close()
			return nil, fmt.Errorf("state dir lock %s: %w", p, err)
		}
		if !said {
			said = true
			log.Warn("another etcd-agent holds this state dir; waiting for it to exit", zap.String("lock", p), zap.Duration("atMost", wait))
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("another etcd-agent process holds the state dir %s (lock %s) after %s: run exactly one agent per node and state dir", dir, p, wait)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
