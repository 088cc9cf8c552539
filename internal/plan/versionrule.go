package plan

import (
	"fmt"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/etcdversion"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// checkVersions refuses, before any change, a learner whose etcd minor
// the cluster cannot take (docs/recovery.md, "etcd versions"):
//
//   - below the cluster version, or below the lowest minor of the members
//     that stay (learner-version-below-cluster): etcd refuses to start a
//     member older than the cluster version, and once the replaced member
//     is removed the leader raises the cluster version to the lowest minor
//     left within seconds. A 3.5 learner in a cluster whose other members
//     run 3.6 would be removed, then never start: one voter short.
//   - more than one minor above them (version-skew): etcd upgrades one
//     minor at a time.
//   - unknown (learner-version-unknown) while the cluster is mid-upgrade:
//     the members that stay run different minors, or a newer one than the
//     cluster version. In a cluster of one minor an unknown learner is
//     taken to run it, as before this rule.
func checkVersions(in Input) (Decision, bool) {
	action := requestAction(in)
	if action == ActionMoveOut {
		return Decision{}, true // it retires a member, adds none
	}
	replaced := uint64(0)
	switch {
	case action == ActionMoveIn && in.Request != nil:
		replaced = in.Request.Replaces
	case in.Obs.Local.Match == observation.MatchOK:
		replaced = in.Obs.Local.ID
	}
	return versionsAllow(in.Obs, in.LearnerVersion, replaced, action == ActionMoveIn)
}

// versionsAllow is the rule for a learner of learnerVersion replacing
// member replaced (0: none); addFirst when the learner is added before
// the replaced member is removed (a move-in).
func versionsAllow(o observation.Observation, learnerVersion string, replaced uint64, addFirst bool) (Decision, bool) {
	for _, m := range o.Members {
		if m.Serving && m.DowngradeEnabled {
			return refuse(ReasonDowngradeInProgress, fmt.Sprintf("member %s reports an etcd downgrade in progress: only its target minor may join, and the cluster version moves with it; "+
				"finish or cancel the downgrade (etcdctl downgrade cancel), then the member is healed", m.Name)), false
		}
	}
	cluster := etcdversion.Parse(o.ClusterVersion)
	lowest, highest, staying := stayingMinors(o, replaced)
	// A rejoin removes first: the cluster version then rises to the lowest
	// minor that stays, before the learner is added. A move-in adds
	// first: the learner itself then holds the cluster version.
	floor, ceiling := lowest, lowest
	if addFirst || !floor.Known() || (cluster.Known() && floor.Less(cluster)) {
		floor = cluster
	}
	if addFirst || !ceiling.Known() {
		ceiling = cluster
	}
	learner := etcdversion.Parse(learnerVersion)
	facts := fmt.Sprintf("cluster version %s, members that stay run %s", orUnknown(o.ClusterVersion), staying)
	if !learner.Known() {
		// Mid-upgrade: the members that stay mix minors, or run the minor
		// after the cluster version (the lost member holds it back). A
		// cluster version further behind is not an upgrade etcd supports:
		// it is one the leader never raised (it reads every member's
		// version over the peer URLs; the real-node lab shows 3.0.0 beside
		// 3.6 members), and says nothing of the learner.
		if lowest != highest || (cluster.Known() && lowest.Known() && cluster.Next() == lowest) {
			return refuse(ReasonLearnerVersionUnknown, fmt.Sprintf("the cluster is mid-upgrade (%s) and the etcd version the member would run is unknown "+
				"(its image names none): a learner older than the cluster's minor would never start; finish the upgrade of the other members' manifests, give its image a version tag, or heal it by hand", facts)), false
		}
		return Decision{}, true
	}
	if floor.Known() && learner.Less(floor) {
		return refuse(ReasonLearnerVersionBelowCluster, fmt.Sprintf("the member would run etcd %s, the cluster needs %s or newer (%s): etcd would refuse it once its old member is removed; "+
			"upgrade its manifest's etcd first (docs/recovery.md, \"etcd versions\")", learnerVersion, floor, facts)), false
	}
	if ceiling.Known() && ceiling.Next().Less(learner) {
		return refuse(ReasonVersionSkew, fmt.Sprintf("the member would run etcd %s, more than one minor above %s (%s): etcd upgrades one minor at a time",
			learnerVersion, ceiling, facts)), false
	}
	return Decision{}, true
}

// requestAction is the request a decision is for: asked now, or the open
// recovery's ("" for a rejoin).
func requestAction(in Input) string {
	if in.Request != nil {
		return in.Request.Action
	}
	return in.Journal.Request
}

// stayingMinors are the lowest and highest etcd minors of the serving
// members that stay in the cluster (all but replaced), and their versions
// as text.
func stayingMinors(o observation.Observation, replaced uint64) (lowest, highest etcdversion.Minor, text string) {
	var vs []string
	for _, m := range o.Members {
		if !m.Serving || m.ID == replaced {
			continue
		}
		v := etcdversion.Parse(m.Version)
		if !v.Known() {
			continue
		}
		vs = append(vs, m.Name+"="+m.Version)
		if !lowest.Known() || v.Less(lowest) {
			lowest = v
		}
		if !highest.Known() || highest.Less(v) {
			highest = v
		}
	}
	if len(vs) == 0 {
		return lowest, highest, "unknown versions"
	}
	return lowest, highest, strings.Join(vs, ", ")
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
