package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"go.uber.org/zap"
)

// statusWriter writes the one-line status annotation (nodereport.Reporter).
type statusWriter interface {
	SetStatus(ctx context.Context, status string) error
}

// nodeStatus publishes the member's state on the Node (annotation
// etcd-agent.io/status) once per change, from a goroutine of its own: the
// observation loop never waits for the API. The latest line wins; a failed
// write is retried every retryEvery until it lands or a newer line replaces
// it, and logged once per error.
type nodeStatus struct {
	pending chan string
}

const statusRetryEvery = 10 * time.Second

func startNodeStatus(ctx context.Context, w statusWriter, log *zap.Logger, retryEvery time.Duration) *nodeStatus {
	s := &nodeStatus{pending: make(chan string, 1)}
	go func() {
		var line, lastErr string
		var retry <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case line = <-s.pending:
			case <-retry:
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := w.SetStatus(wctx, line)
			cancel()
			retry = nil
			switch {
			case err != nil && err.Error() != lastErr:
				log.Warn("writing the member's status on the Node failed; retrying", zap.String("status", line), zap.Error(err))
				lastErr = err.Error()
				retry = time.After(retryEvery)
			case err != nil:
				retry = time.After(retryEvery)
			default:
				lastErr = ""
			}
		}
	}()
	return s
}

// publish hands the newest line to the writer, replacing one not yet written.
func (s *nodeStatus) publish(line string) {
	if s == nil {
		return
	}
	select {
	case <-s.pending:
	default:
	}
	s.pending <- line
}

// statusLine is the Node's one-line view of the member: state, reason,
// the cluster's health; no timestamps, so that it changes only with them,
// except while a long step of a recovery runs: how far it is (the reporter
// writes that every progressEvery).
func statusLine(member string, res memberstate.Result, ests []progress.Estimate) string {
	v, o := res.Verdict, res.Observation
	line := fmt.Sprintf("%s (%s): member %s, %d/%d voters healthy, data dir %s", v.State, v.Reason, member,
		o.HealthyVoters(), o.Voters(), o.Local.DataDirClass)
	switch {
	case v.MajorityLost && v.State == memberstate.Recovering:
		// plan waits mid-recovery (nothing destructive) until it is back.
		line += "; MAJORITY LOST: quorum is gone, the recovery waits for it (nothing destructive)"
	case v.MajorityLost:
		line += "; MAJORITY LOST: quorum is gone, the agent will not act"
	}
	if v.State == memberstate.Recovering {
		line += "; recovery in progress"
	}
	for _, e := range ests {
		line += "; " + e.String()
	}
	return line
}
