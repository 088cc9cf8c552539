package heal

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
)

// Review finding (issue 10): --dry-run ("nothing changes, in every phase") does not
// stop Housekeep, which deletes quarantined copies. run.go calls Housekeep
// whenever Consider attempted nothing, which under dry-run is every poll.
func TestDryRunNeverPrunesTheQuarantine(t *testing.T) {
	r := newRig(t)
	r.h.cfg.Plan.DryRun = true
	t0 := time.Now().UTC().Truncate(time.Second)
	clock := t0
	r.h.now = func() time.Time { return clock }
	r.h.cfg.QuarantineKeep = 1
	qdir := filepath.Join(r.dir, "etcd-agent-quarantine")
	dirs, snaps := quarantined(t, qdir, 3, t0)
	for _, when := range []time.Duration{0, time.Minute + r.h.cfg.QuarantinePruneAfter} {
		clock = t0.Add(when)
		res := cluster3(memberstate.Healthy, 1, 2, 3)
		res.Observation.At = clock
		if out := r.h.Consider(t.Context(), res, nil); out.Result != "" {
			t.Fatalf("Consider: %+v", out)
		}
		r.h.Housekeep(res) // as run.go does when out.Result == ""
	}
	if got := present(append(dirs, snaps...)); len(got) != 6 {
		t.Fatalf("dry-run agent deleted %d quarantined copies; left %v", 6-len(got), got)
	}
}
