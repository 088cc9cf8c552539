package heal

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/snapshotstore"
)

// fakeStreams stands in for peerseed.Stream: each call writes a small file
// at dest; fail makes the calls whose number (from 1) it lists fail.
type fakeStreams struct {
	mu      sync.Mutex
	calls   int
	started chan struct{} // closed by the first call
	fail    map[int]bool
}

func newFakeStreams() *fakeStreams { return &fakeStreams{started: make(chan struct{})} }

func (f *fakeStreams) stream(ctx context.Context, endpoint string, _ *tls.Config, dest string, _ uint64, _ func(int64), _ ...peerseed.StreamOption) (peerseed.Snapshot, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	if n == 1 {
		close(f.started)
	}
	f.mu.Unlock()
	if f.fail[n] {
		return peerseed.Snapshot{}, errors.New("stream broke")
	}
	// As peerseed.Stream: never over a file that is there.
	if err := writeNew(dest, []byte("db")); err != nil {
		return peerseed.Snapshot{}, err
	}
	return peerseed.Snapshot{Path: dest, Size: 2, SHA256: "ab", Source: endpoint}, nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (f *fakeStreams) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// A rig whose stop ends only once the backup stream has begun (or fails
// after its slice): the two run side by side or not at all. The removal
// fails, so the attempt ends right after the snapshot step.
func earlyRig(t *testing.T, fs *fakeStreams) *rig {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	r.h.streamTo = fs.stream
	r.rt.onStop = func(ctx context.Context) error {
		select {
		case <-fs.started:
			return nil
		case <-ctx.Done():
			return errors.New("the stop ended without the backup streaming beside it")
		}
	}
	r.h.stopSlice = 200e6 // 200 ms
	r.cluster.removeErr = errBoom
	return r
}

func snapshotsIn(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "etcd-agent-quarantine", "snapshot-m1-*.db"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestThePreChangeBackupStreamsWhileTheMemberStops(t *testing.T) {
	fs := newFakeStreams()
	r := earlyRig(t, fs)
	r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	j := r.journal(t)
	if r.rt.stops == 0 || !j.Phase.AtLeast("snapshotted") {
		t.Fatalf("stops %d, journal phase %q: want the stop and the snapshot done", r.rt.stops, j.Phase)
	}
	if fs.count() != 1 {
		t.Errorf("%d streams, want 1: the backup streamed during the stop is the pre-change backup", fs.count())
	}
	if _, err := os.Stat(j.SnapshotPath); err != nil || j.SnapshotSource != "m3" {
		t.Errorf("journal backup %q from %q: %v; want the early stream's file, from the follower m3", j.SnapshotPath, j.SnapshotSource, err)
	}
	if len(r.cluster.removed) != 0 || len(snapshotsIn(t, r.dir)) != 1 {
		t.Errorf("removed %v, backups %v: want no removal (it failed) and the one backup kept", r.cluster.removed, snapshotsIn(t, r.dir))
	}
}

func TestAFailedEarlyBackupIsStreamedAnew(t *testing.T) {
	fs := newFakeStreams()
	fs.fail = map[int]bool{1: true}
	r := earlyRig(t, fs)
	r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	j := r.journal(t)
	if !j.Phase.AtLeast("snapshotted") || fs.count() != 2 {
		t.Fatalf("phase %q after %d streams: want the snapshot step's own stream after the early one failed", j.Phase, fs.count())
	}
	if _, err := os.Stat(j.SnapshotPath); err != nil {
		t.Errorf("journal backup %q: %v", j.SnapshotPath, err)
	}
}

func TestAnEarlyBackupNotTakenIsRemovedWhenTheAttemptEnds(t *testing.T) {
	fs := newFakeStreams()
	r := earlyRig(t, fs)
	r.rt.onStop = func(ctx context.Context) error {
		select { // the stop fails every time: no snapshot step
		case <-fs.started:
			return errBoom
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	if j := r.journal(t); j.SnapshotPath != "" || r.rt.stops == 0 {
		t.Fatalf("backup %q after %d stops: want the attempt failed in its stop", j.SnapshotPath, r.rt.stops)
	}
	if fs.count() != 1 {
		t.Errorf("%d streams, want 1 (one early backup per attempt)", fs.count())
	}
	if left := snapshotsIn(t, r.dir); len(left) != 0 {
		t.Errorf("left %v: an early backup the attempt did not take is removed at its end", left)
	}
}

// The removal waits for the backup streaming since the stop: it is the
// pre-change backup, whole and verified before any membership change.
func TestTheRemovalWaitsForTheBackupStreamingSinceTheStop(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	started, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	r.h.streamTo = func(ctx context.Context, endpoint string, _ *tls.Config, dest string, _ uint64, _ func(int64), _ ...peerseed.StreamOption) (peerseed.Snapshot, error) {
		close(started)
		select { // a slow stream: still running when the stop is done
		case <-release:
		case <-ctx.Done():
			return peerseed.Snapshot{}, ctx.Err()
		}
		if err := writeNew(dest, []byte("db")); err != nil {
			return peerseed.Snapshot{}, err
		}
		finished.Store(true)
		return peerseed.Snapshot{Path: dest, Size: 2, SHA256: "ab", Source: endpoint}, nil
	}
	r.rt.onStop = func(ctx context.Context) error { <-started; return nil }
	r.h.cfg.RecoveryTimeout = 10 * time.Second
	var removedEarly atomic.Bool
	r.cluster.removeErr = errBoom
	r.cluster.onRemove = func() { removedEarly.Store(removedEarly.Load() || !finished.Load()) }
	go func() { // the stream ends once the stop is journaled
		for {
			if j, _, err := journal.Load(r.dir, "m1"); err == nil && j.Phase.AtLeast(journal.PhaseStopped) {
				close(release)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	j := r.journal(t)
	if removedEarly.Load() || !finished.Load() || j.SnapshotPath == "" || len(r.cluster.calls) == 0 {
		t.Fatalf("removal before the stream ended: %v; stream finished %v; journal backup %q; calls %v",
			removedEarly.Load(), finished.Load(), j.SnapshotPath, r.cluster.calls)
	}
}

// cluster5 is cluster3 with two more serving voters, m4 and m5.
func cluster5(local memberstate.State, serving ...int) memberstate.Result {
	r := cluster3(local, serving...)
	for i := 4; i <= 5; i++ {
		m := r.Observation.Members[2]
		m.ID, m.Name = 0xa0+uint64(i), "m"+string(rune('0'+i))
		m.PeerURLs = []string{peerURL(i)}
		m.ClientURLs = []string{"https://10.0.0." + string(rune('0'+i)) + ":2379"}
		m.Serving, m.IsLeader = true, false
		r.Observation.Members = append(r.Observation.Members, m)
	}
	return r
}

// The early stream's source misses a health check: the snapshot step
// streams anew from another follower, after the early stream has ended and
// its file is gone; never two streams at once, and the journaled backup is
// the new one (the second stream may get the first one's name).
func TestAnEarlyBackupFromASourceNoLongerChosenEndsBeforeTheNextStream(t *testing.T) {
	r := newRig(t, cluster5(memberstate.Lost, 2, 3, 4, 5))
	var running, maxRunning, calls atomic.Int32
	started := make(chan struct{})
	var firstDest string
	r.h.streamTo = func(ctx context.Context, endpoint string, _ *tls.Config, dest string, _ uint64, _ func(int64), _ ...peerseed.StreamOption) (peerseed.Snapshot, error) {
		n := running.Add(1)
		defer running.Add(-1)
		maxRunning.Store(max(maxRunning.Load(), n))
		if calls.Add(1) == 1 {
			firstDest = dest
			close(started)
			<-ctx.Done() // a source that hangs
			return peerseed.Snapshot{}, ctx.Err()
		}
		if err := writeNew(dest, []byte("db")); err != nil {
			return peerseed.Snapshot{}, err
		}
		return peerseed.Snapshot{Path: dest, Size: 2, SHA256: "ab", Source: endpoint}, nil
	}
	r.rt.onStop = func(ctx context.Context) error { <-started; return nil }
	r.cluster.removeErr = errBoom
	r.obs.res = []memberstate.Result{cluster5(memberstate.Lost, 2, 3, 4, 5), cluster5(memberstate.Lost, 2, 4, 5)} // m3 missed a check
	r.h.Consider(context.Background(), cluster5(memberstate.Lost, 2, 3, 4, 5), nil)
	j := r.journal(t)
	if calls.Load() != 2 || maxRunning.Load() != 1 {
		t.Fatalf("%d streams, at most %d at once: want 2, one at a time", calls.Load(), maxRunning.Load())
	}
	if _, err := os.Stat(j.SnapshotPath); err != nil || j.SnapshotSource == "m3" {
		t.Fatalf("journal backup %q from %q: %v; want the second stream's, kept", j.SnapshotPath, j.SnapshotSource, err)
	}
	if firstDest != j.SnapshotPath {
		if _, err := os.Stat(firstDest); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the early stream's file %s is left (%v)", firstDest, err)
		}
	}
}

// The Lease lapses after the stop and is taken again: a backup streamed
// under the earlier hold is not this hold's (another agent may have added
// and removed a learner in the gap, which a learner seeded from it would
// replay): it is dropped and the backup streamed anew.
func TestAnEarlyBackupIsNotTakenAcrossALeaseGap(t *testing.T) {
	fs := newFakeStreams()
	r := earlyRig(t, fs)
	var stopped, lapsed atomic.Bool
	r.rt.onStop = func(ctx context.Context) error {
		select {
		case <-fs.started:
		case <-ctx.Done():
			return ctx.Err()
		}
		stopped.Store(true)
		return nil
	}
	r.obs.onObserve = func(int) {
		if stopped.Load() && !lapsed.Load() {
			lapsed.Store(true)
			r.lease.mu.Lock()
			r.lease.held = false // lapsed; free now
			r.lease.mu.Unlock()
		}
	}
	r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	j := r.journal(t)
	if r.lease.acquires < 2 || !j.Phase.AtLeast(journal.PhaseSnapshotted) {
		t.Fatalf("acquires %d, phase %q: want the Lease taken again and the snapshot done", r.lease.acquires, j.Phase)
	}
	if fs.count() != 2 {
		t.Errorf("%d streams: want the backup streamed anew under the new hold, not the one from before the gap", fs.count())
	}
	if got := snapshotsIn(t, r.dir); len(got) != 1 || got[0] != j.SnapshotPath {
		t.Errorf("backups %v, journal %q: want only the journaled one", got, j.SnapshotPath)
	}
}

// Seed mode falls back to raft mode: the backup's copy for the seed goes at
// once, before the leader's raft snapshot needs its room.
func TestASeedFallbackRemovesTheBackupsCopy(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	r.h.cfg.RejoinMode = RejoinSeed
	if err := os.MkdirAll(r.h.cfg.QuarantineDir, 0o700); err != nil {
		t.Fatal(err)
	}
	cp := r.h.seedStreamPath()
	if err := os.WriteFile(cp, []byte("db"), 0o600); err != nil {
		t.Fatal(err)
	}
	j := journal.Record{ID: "j1", SnapshotPath: filepath.Join(r.h.cfg.QuarantineDir, "snapshot-m1-2026-12-04T12-00-00Z.db"), SnapshotBytes: 2}
	r.h.backupCopy = backupCopy{recovery: "j1", path: cp}
	if err := r.h.prepareDataDir(context.Background(), cluster3(memberstate.Lost, 2, 3), &j, plan.ChooseSeed(j, r.h.planConfig())); err != nil {
		t.Fatal(err)
	}
	if j.SeedFallback == "" {
		t.Fatalf("journal %+v: want a seed fallback (no learner ID)", j)
	}
	mustBeGone(t, cp)
	if r.h.backupCopy.path != "" {
		t.Errorf("the healer still names the copy %q", r.h.backupCopy.path)
	}
}

func mustBeGone(t *testing.T, p string) {
	t.Helper()
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is left (%v)", p, err)
	}
}

// The backup's stream writes the seed's copy only when it will seed: seed
// mode, a rejoin, the backup seeding, and not turned off.
func TestTheBackupStreamWritesTheSeedsCopyOnlyWhenItSeeds(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   func(*Config)
		req   string
		store string // the journal's StoreKey
		want  bool
	}{
		{"seed mode, a rejoin", func(*Config) {}, "auto", "", true},
		{"raft mode", func(c *Config) { c.RejoinMode = RejoinRaft }, "auto", "", false},
		{"--seed-from-backup=false", func(c *Config) { c.NoBackupSeed = true }, "auto", "", false},
		{"--seed-copy-during-stream=false", func(c *Config) { c.NoCopyDuringStream = true }, "auto", "", false},
		{"a move-in (seeds from the store)", func(*Config) {}, plan.ActionMoveIn, "", false},
		// The first rejoin on the PV a pod move reserved is seeded from the
		// move's stored snapshot: a copy of the backup would only take room
		// the store's fetch needs (a disk-full fallback).
		{"a pod move's stored snapshot seeds it", storeSeeds, "auto", "etcd-agent/c1/move.db", false},
		{"a stored snapshot, --seed-from-store=false", func(c *Config) { storeSeeds(c); c.NoStoreSeed = true }, "auto", "etcd-agent/c1/move.db", true},
		{"a stored snapshot of another move", storeSeeds, "auto", "etcd-agent/c1/older.db", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, cluster3(memberstate.Lost, 2, 3))
			r.h.cfg.RejoinMode = RejoinSeed
			c.cfg(&r.h.cfg)
			if got := len(r.h.copyForSeed(journal.Record{Request: c.req, StoreKey: c.store})) > 0; got != c.want {
				t.Errorf("a copy: %v, want %v", got, c.want)
			}
		})
	}
}

// storeSeeds configures the pod move's stored snapshot a first rejoin on
// its PV is seeded from.
func storeSeeds(c *Config) {
	c.OpenStore = func(context.Context) (*snapshotstore.Store, error) { return nil, errors.New("not opened in this test") }
	c.StoreSeed = &StoreSeed{Key: "etcd-agent/c1/move.db", From: "node9", ClusterID: 0xc1}
}

// A stream that does not end after its cancel holds the drop only as long
// as its caller waits (the agent stopping ends the wait at once), and is
// kept to be dropped again.
func TestTheDropOfAStuckEarlyBackupEndsWithItsCaller(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	stuck := &earlyBackup{recovery: "j1", cancel: func() {}, done: make(chan struct{})} // never ends
	r.h.early = stuck
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if r.h.dropEarlyBackup(ctx) || r.h.early != stuck {
		t.Fatalf("dropped a stream that has not ended")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the drop waited %s after its caller's context ended", took)
	}
}

// The drop never removes the backup the saved journal names.
func TestTheDropKeepsTheBackupTheJournalNames(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	backup := filepath.Join(t.TempDir(), "snapshot-m1-2026-12-04T12-00-00Z.db")
	if err := os.WriteFile(backup, []byte("db"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := journal.Save(r.dir, journal.Record{ID: "j1", Member: "m1", SnapshotPath: backup}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	close(done)
	r.h.early = &earlyBackup{recovery: "j1", cancel: func() {}, done: done, snap: peerseed.Snapshot{Path: backup}}
	if !r.h.dropEarlyBackup(context.Background()) {
		t.Fatal("the drop of an ended stream said it had not ended")
	}
	if _, err := os.Stat(backup); err != nil {
		t.Fatalf("the journal's backup was removed: %v", err)
	}
}

// A backup streamed under an earlier hold that does not end after its
// cancel keeps the Lease from being taken again: nothing began, so it is a
// refusal (said and counted once, the next poll asks again), not a failed
// attempt with its backoff and RecoveryFailed Event; once the stream has
// ended the recovery begins.
func TestABackupOfAnEarlierHoldThatLingersRefusesTheTakeInsteadOfFailing(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	stuck := &earlyBackup{recovery: "an earlier hold", cancel: func() {}, done: make(chan struct{})}
	r.h.early, r.h.earlyDropWait = stuck, 300*time.Millisecond
	for i := range 3 {
		start := time.Now()
		out := r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
		if out.Result != journal.ResultRefused || out.Decision.Reason != plan.ReasonRecoveryInProgress {
			t.Fatalf("poll %d: %s/%s (%s): want refused, %s", i, out.Result, out.Decision.Reason, out.Decision.Detail, plan.ReasonRecoveryInProgress)
		}
		// The wait for it is once, not on every poll (which would hold up
		// the agent's loop for as long as the stream lingers).
		if took := time.Since(start); i > 0 && took >= r.h.earlyDropWait {
			t.Fatalf("poll %d waited %s for the lingering stream again", i, took)
		}
	}
	if j := r.journal(t); j.Failures != 0 || j.Result == journal.ResultFailed || r.lease.acquires != 0 {
		t.Fatalf("journal %s with %d failures, %d takes: want nothing begun or failed", j.Result, j.Failures, r.lease.acquires)
	}
	if n := r.refusals(string(plan.ReasonRecoveryInProgress)); n != 1 || slices.Contains(r.rep.events, nodereport.ReasonRecoveryFailed) {
		t.Fatalf("%v refusals counted, Events %v: want one refusal, no RecoveryFailed", n, r.rep.events)
	}
	close(stuck.done)
	r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	if r.lease.acquires == 0 || !r.journal(t).Phase.AtLeast(journal.PhaseStarted) {
		t.Fatalf("%d takes, phase %q: want the recovery begun once the stream ended", r.lease.acquires, r.journal(t).Phase)
	}
}

// Review (helper 61): an early stream from a source no longer chosen that
// ends late after its cancel (a slow disk) is waited for on each retry of
// the snapshot step, as before: the "waited once" mark is for the take of
// a new hold, not for the retries inside one (it failed the attempt after
// one wait: the later retries only looked, 5 ms apart).
func TestARetryInsideAHoldWaitsAgainForAnEarlyStreamThatEndsLate(t *testing.T) {
	r := newRig(t, cluster5(memberstate.Lost, 2, 3, 4, 5))
	r.h.earlyDropWait = 100 * time.Millisecond
	var calls atomic.Int32
	started := make(chan struct{})
	r.h.streamTo = func(ctx context.Context, endpoint string, _ *tls.Config, dest string, _ uint64, _ func(int64), _ ...peerseed.StreamOption) (peerseed.Snapshot, error) {
		if calls.Add(1) == 1 {
			close(started)
			<-ctx.Done()
			time.Sleep(150 * time.Millisecond) // ends late after its cancel, past one drop's wait
			return peerseed.Snapshot{}, ctx.Err()
		}
		if err := writeNew(dest, []byte("db")); err != nil {
			return peerseed.Snapshot{}, err
		}
		return peerseed.Snapshot{Path: dest, Size: 2, SHA256: "ab", Source: endpoint}, nil
	}
	r.rt.onStop = func(ctx context.Context) error { <-started; return nil }
	r.obs.res = []memberstate.Result{cluster5(memberstate.Lost, 2, 3, 4, 5), cluster5(memberstate.Lost, 2, 4, 5)} // m3 missed a check
	r.cluster.removeErr = errBoom                                                                                 // the attempt ends at the removal: what matters is the backup before it
	r.h.Consider(context.Background(), cluster5(memberstate.Lost, 2, 3, 4, 5), nil)
	if j := r.journal(t); j.SnapshotPath == "" || calls.Load() != 2 || !slices.Contains(r.cluster.calls, "remove") {
		t.Fatalf("journal %s (%s), backup %q after %d streams, changes %v: want the backup streamed anew once the early stream ended, then the removal tried",
			j.Result, j.Message, j.SnapshotPath, calls.Load(), r.cluster.calls)
	}
}
