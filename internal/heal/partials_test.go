package heal

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
)

// An agent killed while it streamed a backup (or wrote the seed's copy)
// leaves its part file in the quarantine: a partial, never a copy of
// anything, as large as the db streamed so far. Nothing removed it, so it
// weighed against every later attempt's room (a disk-full refusal with the
// member down, or a resumed stream failing on ErrDiskFull). The first
// decision of a new agent process, when none of its streams can run yet,
// removes this member's part files and nothing else.
func TestAKilledAgentsPartialStreamsAreRemovedAtTheNextStart(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	r := newRig(t, res)
	qdir := r.h.cfg.QuarantineDir
	if err := os.MkdirAll(qdir, 0o700); err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().UTC().Format(localdisk.SnapshotStampLayout)
	seedStamp := time.Now().UTC().Format(seedStampLayout)
	write := func(name string) string {
		p := filepath.Join(qdir, name)
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gone := []string{
		write("snapshot-m1-" + stamp + ".db.part"),       // the backup's stream
		write("seed-m1-" + seedStamp + ".db.part"),       // the seed's copy written during it
		write(".seed-m1-" + seedStamp + ".db.4711.part"), // a fetch from the snapshot store
	}
	kept := []string{
		write("snapshot-m1-" + stamp + ".db"),             // a verified backup
		write("snapshot-m10-" + stamp + ".db.part"),       // another member's, maybe streaming now
		write("snapshot-m1-not-a-stamp.db.part"),          // not a name the agent writes
		write(".snapshot-m1-" + stamp + ".db.x.part"),     // nor this
		write(".seed-m1-" + seedStamp + ".db.4711"),       // nor this
		write(".seed-m10-" + seedStamp + ".db.4711.part"), // another member's fetch
	}
	r.h.Consider(context.Background(), res, nil)
	if left := present(gone); len(left) > 0 {
		t.Errorf("a killed agent's part files still there after the next start's first decision: %v", left)
	}
	if left := present(kept); !slices.Equal(left, kept) {
		t.Errorf("kept %v, want all of %v", left, kept)
	}
	// Once per process: a part file written after the start is a stream of
	// this process, never removed under it.
	inFlight := write("snapshot-m1-" + stamp + ".db.part")
	r.h.Consider(context.Background(), res, nil)
	r.h.Housekeep(res)
	if len(present([]string{inFlight})) != 1 {
		t.Error("a part file written after the start was removed: it may be this process's own stream")
	}
}

// Housekeep alone (a healthy member: the agent does not call Consider) also
// removes them at the start.
func TestAKilledAgentsPartialStreamsAreRemovedByTheFirstHousekeep(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	r := newRig(t, res)
	if err := os.MkdirAll(r.h.cfg.QuarantineDir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(r.h.cfg.QuarantineDir, "snapshot-m1-"+time.Now().UTC().Format(localdisk.SnapshotStampLayout)+".db.part")
	if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.h.Housekeep(res)
	if len(present([]string{p})) != 0 {
		t.Errorf("%s still there after the first Housekeep", p)
	}
}

// Dry-run changes nothing, a killed agent's part file included.
func TestADryRunAgentKeepsAKilledAgentsPartialStreams(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	r := newRig(t, res)
	r.h.cfg.Plan.DryRun = true
	if err := os.MkdirAll(r.h.cfg.QuarantineDir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(r.h.cfg.QuarantineDir, "snapshot-m1-"+time.Now().UTC().Format(localdisk.SnapshotStampLayout)+".db.part")
	if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.h.Consider(context.Background(), res, nil)
	r.h.Housekeep(res)
	if len(present([]string{p})) != 1 {
		t.Errorf("dry-run removed %s", p)
	}
}
