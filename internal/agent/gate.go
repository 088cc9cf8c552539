package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.uber.org/zap"
)

// GateVerdict is the start gate's answer for one look at the data dir.
type GateVerdict struct {
	Pass   bool
	Reason string
}

// DecideGate is the gate's rule, pure: etcd may start on a data dir that is
// ok, or that the agent prepared; never on a missing/empty/corrupt/foreign
// one while the member still exists under its old ID (it ran before: it has
// client URLs), because raft would have lost its vote and log.
func DecideGate(class localdisk.Class, j journal.Record, obs observation.Observation, listed bool, bootstrap bool) GateVerdict {
	if class == localdisk.ClassOK {
		return GateVerdict{true, "data dir ok"}
	}
	if j.Active() && j.Phase.AtLeast(journal.PhasePrepared) {
		return GateVerdict{true, fmt.Sprintf("data dir prepared by the agent for learner %x", uint64(j.NewMemberID))}
	}
	if class == localdisk.ClassCorrupt || class == localdisk.ClassForeign || class == localdisk.ClassInUse {
		return GateVerdict{false, fmt.Sprintf("data dir is %s: waiting for the agent to replace it", class)}
	}
	// missing or empty
	if !listed {
		if bootstrap {
			return GateVerdict{true, "data dir " + string(class) + ", cluster not reachable and --initial-cluster-state=new: bootstrapping"}
		}
		return GateVerdict{false, "data dir " + string(class) + " and the cluster is not reachable: cannot tell whether the member exists"}
	}
	if obs.Local.Match == observation.MatchAmbiguous {
		return GateVerdict{false, "member identity is ambiguous: " + obs.Local.MatchDetail}
	}
	if obs.Local.Match == observation.MatchOK {
		if m, ok := obs.Member(obs.Local.ID); ok && len(m.ClientURLs) > 0 {
			return GateVerdict{false, fmt.Sprintf("data dir %s while member %x still exists under its old ID: waiting for the agent to prepare it", class, m.ID)}
		}
		return GateVerdict{true, "member added but never started: a fresh member starts on an empty data dir"}
	}
	return GateVerdict{true, "data dir " + string(class) + " and the member is not in the cluster"}
}

// Gate blocks until DecideGate passes (or timeout, 0 = no limit); it is the
// etcd static pod's init container.
func Gate(ctx context.Context, c Config, timeout time.Duration) error {
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	id, err := ResolveIdentity(c)
	if err != nil {
		return err
	}
	bootstrap := false
	if m, err := manifest.LoadMember(c.StaticPodManifest); err == nil {
		bootstrap = m.InitialClusterState == "" || m.InitialClusterState == "new"
	}
	wd, err := c.NewWatchdog(id)
	if err != nil {
		return err
	}
	defer wd.Close()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	log := c.Log.With(zap.String("member", id.Name), zap.String("dataDir", id.DataDir))
	lastReason := ""
	for {
		r := localdisk.Classify(ctx, id.DataDir, localdisk.Expect{})
		j, _, err := journal.Load(c.StateDir, id.Name)
		if err != nil {
			return err
		}
		v := GateVerdict{Pass: r.Class == localdisk.ClassOK, Reason: "data dir ok"}
		if !v.Pass {
			obs := wd.Observe(ctx, time.Now()).Observation
			listed := obs.MemberListError == ""
			v = DecideGate(r.Class, j, obs, listed, bootstrap)
		}
		if v.Pass {
			log.Info("start gate open", zap.String("reason", v.Reason))
			return nil
		}
		if v.Reason != lastReason {
			log.Warn("start gate holds etcd back", zap.String("reason", v.Reason), zap.String("class", string(r.Class)), zap.String("detail", r.Detail))
			lastReason = v.Reason
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("start gate: still closed (%s): %w", v.Reason, ctx.Err())
		case <-time.After(c.PollInterval):
		}
	}
}
