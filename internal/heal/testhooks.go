package heal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"go.uber.org/zap"
)

// The e2e suite's hooks: hold a recovery at a point until the test
// releases it, or SIGKILL the agent before the journal records a phase.
// They are etcd's own failpoints (go.etcd.io/gofail): a `// gofail:`
// comment is code only in the agent the lab builds for its tests
// (labtest.BuildAgent runs `gofail enable` on a copy of the tree); in the
// product binary it is a comment, and no flag or input reaches the hooks.
// docs/design.md, "Test hooks".

// Failpoint names, as GOFAIL_FAILPOINTS sets them (HoldAtFailpoint,
// CrashBeforeFailpoint).
const (
	failpointHoldAt      = "testHoldAt"
	failpointCrashBefore = "testCrashBeforePhase"
)

// Hold points (HoldAtFailpoint).
const (
	// HoldLeaseAcquired: the Lease is acquired and the journal opened (or
	// resumed), rule 6's re-check not yet decided.
	HoldLeaseAcquired = "lease-acquired"
	// HoldSeedStreamed: the seed snapshot is streamed and verified, the data
	// dir not yet built.
	HoldSeedStreamed = "seed-streamed"
	// HoldSeedRename: the seeded data dir is built and synced in its temp
	// dir, not yet renamed into place.
	HoldSeedRename = "seed-rename"
	// HoldMemberStart: the learner's data dir is ready, the member not yet
	// started.
	HoldMemberStart = "member-start"
)

// HoldPoints lists the hold points.
var HoldPoints = []string{HoldLeaseAcquired, HoldSeedStreamed, HoldSeedRename, HoldMemberStart}

// HoldAtFailpoint is the GOFAIL_FAILPOINTS term that holds an agent built
// with failpoints at points (HoldPoints) until the test releases each
// (holdAt). It panics on a point that is not one: a test's typo.
func HoldAtFailpoint(points ...string) string {
	for _, p := range points {
		if !slices.Contains(HoldPoints, p) {
			panic(fmt.Sprintf("hold point %q is not one of %v", p, HoldPoints))
		}
	}
	return failpointHoldAt + "=" + "return(" + strconv.Quote(strings.Join(points, ",")) + ")"
}

// CrashBeforeFailpoint is the GOFAIL_FAILPOINTS term that SIGKILLs an
// agent built with failpoints after the step that completes one of phases,
// before the journal records it (crashBefore).
func CrashBeforeFailpoint(phases ...journal.Phase) string {
	names := make([]string, len(phases))
	for i, p := range phases {
		names[i] = string(p)
	}
	return failpointCrashBefore + "=" + "return(" + strconv.Quote(strings.Join(names, ",")) + ")"
}

// testHoldPoints are the points the e2e suite holds at (none in a release
// build: the failpoint below is a comment there).
func testHoldPoints() []string {
	// gofail: var testHoldAt string
	// return splitHookList(testHoldAt)
	return nil
}

// testCrashPhases are the phases the e2e suite crashes before.
func testCrashPhases() []string {
	// gofail: var testCrashBeforePhase string
	// return splitHookList(testCrashBeforePhase)
	return nil
}

// heldAt is h's hold points (none for a Healer not made by New).
func (h *Healer) heldAt() []string {
	if h.holdPoints == nil {
		return nil
	}
	return h.holdPoints()
}

// splitHookList is a failpoint's comma-separated value.
func splitHookList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' })
}

// holdAt holds the recovery at point when the e2e suite asks for it: it
// logs "test hook: holding" and waits until the file
// <state dir>/test-release-<point> exists (the test creates it; it stays,
// so a restarted agent passes the point at once), or ctx ends.
func (h *Healer) holdAt(ctx context.Context, point string) error {
	if !slices.Contains(h.heldAt(), point) {
		return nil
	}
	release := filepath.Join(h.cfg.StateDir, "test-release-"+point)
	h.log.Warn("test hook: holding", zap.String("point", point), zap.String("release", release))
	_ = h.log.Sync()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(release); err == nil {
			h.log.Warn("test hook: released", zap.String("point", point))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("held at %s: %w", point, ctx.Err())
		case <-tick.C:
		}
	}
}

// crashBefore SIGKILLs the agent when the e2e suite asks for it before the
// journal records phase: the worst moment to die (the change is applied,
// the journal does not know). Once per recovery and phase (firstCrash).
func (h *Healer) crashBefore(recoveryID string, phase journal.Phase) {
	if h.crashPhases == nil || !slices.Contains(h.crashPhases(), string(phase)) || !h.firstCrash(recoveryID, phase) {
		return
	}
	h.log.Warn("crash injected (test hook): SIGKILL before the journal records the phase", zap.String("phase", string(phase)))
	_ = h.log.Sync()
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously; never go on
}

// firstCrash reports whether the test hook has not yet crashed this recovery
// in phase, and marks it done (a file in the state dir, written before the
// SIGKILL). Once per recovery and phase: the restarted agent redoes an
// idempotent step or adopts the change (AdoptLearner also records
// learner-added), and must then go on instead of crashing again forever.
func (h *Healer) firstCrash(recoveryID string, phase journal.Phase) bool {
	marker := filepath.Join(h.cfg.StateDir, fmt.Sprintf(".test-crash-injected-%s-%s", recoveryID, phase))
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false // injected already (or the state dir is unusable: do not crash blind)
	}
	_ = f.Sync()
	_ = f.Close()
	return true
}
