package heal

import (
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
)

// seedVersionOptions tell BuildDataDir which etcd the learner will run,
// for its storage-version check. The learner's own version (its manifest's
// image tag) is not known here yet: "" makes peerseed judge by the serving
// members' version, which is the learner's when it runs the cluster's minor
// (plan.SeedSupported admits clusters of one minor only).
func seedVersionOptions(o observation.Observation) []peerseed.BuildOption {
	return []peerseed.BuildOption{peerseed.WithLearnerVersion(""), peerseed.WithServingVersion(servingVersion(o))}
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
