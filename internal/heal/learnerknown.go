package heal

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
)

// learnerKnownWait bounds the wait for every voter to apply the learner's
// add before it starts (a voter seconds behind on applying, as under a
// large db's load); learnerKnownPoll is how often the voters are asked.
var (
	learnerKnownWait = 30 * time.Second
	learnerKnownPoll = 100 * time.Millisecond
)

// waitLearnerKnown waits (bounded, logged) until every serving voter of the
// observation lists the learner j.NewMemberID at our peer URLs and no
// other member there (plan.LearnerKnownEverywhere says why). It changes
// nothing; past the bound the step fails and is retried on a fresh
// decision.
func (h *Healer) waitLearnerKnown(ctx context.Context, res memberstate.Result, j *journal.Record) error {
	voters := map[string]string{} // name -> client URL
	for _, m := range res.Observation.Members {
		if m.Serving && !m.IsLearner && len(m.ClientURLs) > 0 && m.ID != uint64(j.NewMemberID) {
			voters[m.Name] = m.ClientURLs[0]
		}
	}
	start := time.Now()
	var logged time.Time
	var detail string
	err := wait.PollUntilContextTimeout(ctx, learnerKnownPoll, learnerKnownWait, true, func(ctx context.Context) (bool, error) {
		lists, failed := map[string][]plan.ListedMember{}, map[string]string{}
		for name, ep := range voters {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			list, err := h.cluster.MemberListOf(cctx, ep)
			cancel()
			if err != nil {
				failed[name] = err.Error()
				continue
			}
			lists[name] = list
		}
		var ok bool
		ok, detail = plan.LearnerKnownEverywhere(lists, failed, uint64(j.NewMemberID), j.PeerURLs)
		if !ok && time.Since(logged) >= 5*time.Second {
			logged = time.Now()
			h.log.Info("waiting for every voter to apply the learner's add before it starts", zap.String("detail", detail),
				zap.Duration("waited", time.Since(start).Round(time.Millisecond)), zap.Duration("limit", learnerKnownWait))
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("not every voter applied the add of learner %x within %s (%s): not started, or it could take a removed member's ID: %w",
			uint64(j.NewMemberID), learnerKnownWait, detail, err)
	}
	return nil
}
