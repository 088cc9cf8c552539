package nodereport

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// LastRecoverySetter writes the last-recovery annotation (a Reporter).
type LastRecoverySetter interface {
	SetLastRecovery(ctx context.Context, lr LastRecovery) error
}

// WriteLastRecovery writes lr through s, and once more if that fails (the
// annotation is how a person learns the answer to a request): a second
// failure is logged as an error with the answer it carried, and returned.
// Each try has its own 5 s bound and outlives ctx's cancellation (an agent
// shutting down still says what happened).
func WriteLastRecovery(ctx context.Context, s LastRecoverySetter, log *zap.Logger, lr LastRecovery) error {
	var err error
	for try := range 2 {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = s.SetLastRecovery(tctx, lr)
		cancel()
		if err == nil {
			return nil
		}
		if try == 0 {
			log.Info("writing the last-recovery annotation failed; retrying once", zap.Error(err))
		}
	}
	log.Error("last-recovery annotation not written; the answer is in this log and the Events only",
		zap.String("request", lr.Request), zap.String("result", lr.Result), zap.String("reason", lr.Reason),
		zap.String("message", lr.Message), zap.Error(err))
	return err
}

// Refusal is the last-recovery answer to a request that was not carried
// out: refused with reason, at once (started and finished at at).
func Refusal(request, reason, message string, at time.Time) LastRecovery {
	at = at.UTC()
	return LastRecovery{Request: request, Result: ResultRefused, Reason: reason, StartedAt: at, FinishedAt: at, Message: message}
}
