package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// seedMinors are the etcd minor versions the e2e suite proves seed mode
// against (bin/etcd-3.5, bin/etcd 3.6, bin/etcd-3.7). A 3.5 member reads
// its membership and cluster version from the .snap's v2 store, which the
// seed writes as a 3.6 leader's raft snapshot does (docs/plans/etcd-35.md).
var seedMinors = []string{"3.5.", "3.6.", "3.7."}

// ErrSeedUnsupportedVersion: the data dir layout seed mode writes is proven
// only against the seedMinors, one at a time; anything else (another
// version, or a cluster halfway through an upgrade) rejoins in raft mode,
// which every etcd supports.
var ErrSeedUnsupportedVersion = errors.New("seed mode is proven against etcd 3.5, 3.6 and 3.7 clusters only, not mixed")

// SeedSupported says whether the learner's data dir may be seeded from a
// snapshot in this cluster: every serving member runs one proven minor,
// and the learner (learnerVersion, from its image; "" unknown) runs it too.
// Members that do not serve have no say (their version is unknown).
func SeedSupported(learnerVersion string, o observation.Observation) error {
	minor := ""
	for _, m := range o.Members {
		if !m.Serving {
			continue
		}
		i := slices.IndexFunc(seedMinors, func(p string) bool { return strings.HasPrefix(m.Version, p) })
		if i < 0 {
			return fmt.Errorf("%w: member %s runs %q", ErrSeedUnsupportedVersion, m.Name, m.Version)
		}
		if minor != "" && minor != seedMinors[i] {
			return fmt.Errorf("%w: member %s runs %q, others %sx", ErrSeedUnsupportedVersion, m.Name, m.Version, minor)
		}
		minor = seedMinors[i]
	}
	if learnerVersion == "" {
		return nil
	}
	if minor == "" {
		if !slices.ContainsFunc(seedMinors, func(p string) bool { return strings.HasPrefix(learnerVersion, p) }) {
			return fmt.Errorf("%w: the learner would run %q", ErrSeedUnsupportedVersion, learnerVersion)
		}
		return nil
	}
	if !strings.HasPrefix(learnerVersion, minor) {
		return fmt.Errorf("%w: the learner would run %q, the cluster %sx", ErrSeedUnsupportedVersion, learnerVersion, minor)
	}
	return nil
}
