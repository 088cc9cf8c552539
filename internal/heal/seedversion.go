package heal

import (
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
)

// seedVersionOptions tell BuildDataDir which etcd the learner will run,
// for its storage-version check: its manifest's image tag (learnerVersion,
// "" unknown: peerseed then judges by the serving members' version, which
// plan.SeedSupported has made the learner's minor anyway).
func seedVersionOptions(learnerVersion string, o observation.Observation) []peerseed.BuildOption {
	return []peerseed.BuildOption{peerseed.WithLearnerVersion(learnerVersion), peerseed.WithServingVersion(servingVersion(o))}
}

// servingVersion is the version of the first serving member that reports
// one ("" when none does).
func servingVersion(o observation.Observation) string {
	for _, m := range o.Members {
		if m.Serving && m.Version != "" {
			return m.Version
		}
	}
	return ""
}
