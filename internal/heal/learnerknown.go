package heal

import (
	"context"
	"fmt"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.etcd.io/etcd/server/v3/storage/wal"
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

// waitLearnerKnown waits (bounded, logged) until every member etcd may ask
// for its member list at start (each one initialCluster names besides
// ourselves, serving or not) lists the learner j.NewMemberID at our peer
// URLs and no other member there (plan.LearnerKnownEverywhere says why). A
// member that answers with a stale list blocks; one that does not answer
// blocks only if it serves (a member that is down cannot answer etcd
// either). A data dir that already holds a WAL (a seeded one) is not
// asked about: etcd takes the member ID from the WAL. It changes nothing;
// past the bound the step fails and is retried on a fresh decision.
// (Left: a member that restarts between this check and etcd's request may
// answer from its db before it re-applies the remove; a narrow window.)
func (h *Healer) waitLearnerKnown(ctx context.Context, res memberstate.Result, j *journal.Record) error {
	if wal.Exist(localdisk.Dirs{Data: h.cfg.DataDir, WAL: h.cfg.WALDir}.WALDir()) { // etcd's own test at start, where etcd reads its WAL
		return nil
	}
	type peer struct {
		url     string
		serving bool
	}
	peers := map[string]peer{} // name -> client URL, serving
	for _, m := range initialPeers(res.Observation, j) {
		if len(m.ClientURLs) == 0 {
			continue // never served a client: not serving, nothing to ask
		}
		peers[m.Name] = peer{url: m.ClientURLs[0], serving: m.Serving}
	}
	start := time.Now()
	var logged time.Time
	var detail string
	err := wait.PollUntilContextTimeout(ctx, learnerKnownPoll, learnerKnownWait, true, func(ctx context.Context) (bool, error) {
		lists, failed := map[string][]plan.ListedMember{}, map[string]string{}
		for name, p := range peers {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			list, err := h.cluster.MemberListOf(cctx, p.url)
			cancel()
			switch {
			case err == nil:
				lists[name] = list
			case p.serving:
				failed[name] = err.Error()
			}
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
