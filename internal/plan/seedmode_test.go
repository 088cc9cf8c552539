package plan

import (
	"errors"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/observation"
)

func TestSeedModeOnlyAgainstOneProvenMinor(t *testing.T) {
	obs := func(versions ...string) observation.Observation {
		var o observation.Observation
		for i, v := range versions {
			o.Members = append(o.Members, observation.Member{ID: uint64(i + 1), Name: v, Serving: v != "", Version: v})
		}
		return o
	}
	if err := SeedSupported("", obs("3.6.16", "3.6.16", "3.6.15")); err != nil {
		t.Fatalf("3.6 cluster refused: %v", err)
	}
	if err := SeedSupported("", obs("3.7.3", "3.7.3", "3.7.0")); err != nil {
		t.Fatalf("3.7 cluster refused: %v", err)
	}
	if err := SeedSupported("", obs("3.6.16", "", "3.6.16")); err != nil {
		t.Fatalf("a member that does not serve has no say: %v", err)
	}
	for _, v := range []string{"3.5.21", "3.8.0", "3.60.0-junk", "3.7.3"} {
		if err := SeedSupported("", obs("3.6.16", v)); !errors.Is(err, ErrSeedUnsupportedVersion) {
			t.Fatalf("3.6.16 with %s: %v, want ErrSeedUnsupportedVersion", v, err)
		}
	}
}

// The learner runs the version its manifest names: a data dir seeded in
// the cluster's format is proven only for a learner of that minor (a 3.6
// learner joining a 3.5 cluster mid-upgrade rejoins in raft mode).
func TestSeedModeOnlyForALearnerOfTheClustersMinor(t *testing.T) {
	o := observation.Observation{Members: []observation.Member{{ID: 1, Name: "a", Serving: true, Version: "3.5.36"}, {ID: 2, Name: "b", Serving: true, Version: "3.5.36"}}}
	if err := SeedSupported("3.5.21", o); err != nil {
		t.Fatalf("3.5 learner into a 3.5 cluster refused: %v", err)
	}
	for _, v := range []string{"3.6.16", "3.4.30"} {
		if err := SeedSupported(v, o); !errors.Is(err, ErrSeedUnsupportedVersion) {
			t.Fatalf("learner %s into a 3.5 cluster: %v, want ErrSeedUnsupportedVersion", v, err)
		}
	}
	if err := SeedSupported("3.8.0", observation.Observation{}); !errors.Is(err, ErrSeedUnsupportedVersion) {
		t.Fatalf("an unproven learner with no serving member known: %v", err)
	}
}
