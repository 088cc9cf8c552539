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
	if err := SeedSupported(obs("3.6.16", "3.6.16", "3.6.15")); err != nil {
		t.Fatalf("3.6 cluster refused: %v", err)
	}
	if err := SeedSupported(obs("3.7.3", "3.7.3", "3.7.0")); err != nil {
		t.Fatalf("3.7 cluster refused: %v", err)
	}
	if err := SeedSupported(obs("3.6.16", "", "3.6.16")); err != nil {
		t.Fatalf("a member that does not serve has no say: %v", err)
	}
	for _, v := range []string{"3.5.21", "3.8.0", "3.60.0-junk", "3.7.3"} {
		if err := SeedSupported(obs("3.6.16", v)); !errors.Is(err, ErrSeedUnsupportedVersion) {
			t.Fatalf("3.6.16 with %s: %v, want ErrSeedUnsupportedVersion", v, err)
		}
	}
}
