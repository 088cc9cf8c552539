package heal

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// An agent killed after the backup streamed beside the stop was renamed
// into place, but before the snapshot step journaled it, left a whole,
// verified db that nothing named: the resumed attempt streamed a second one
// beside it (the room of two, maybe a disk-full refusal with the member
// down), and the orphan counted against --quarantine-keep for good. The
// state the killed agent left is taken while its stop still runs, the early
// backup finished; a new agent started on it removes the orphan before any
// stream of its own.
func TestABackupAKilledAgentStreamedButNoJournalNamedIsRemovedAtTheNextStart(t *testing.T) {
	fs := newFakeStreams()
	first := earlyRig(t, fs)
	image, imaged := t.TempDir(), false
	first.rt.onStop = func(ctx context.Context) error {
		<-fs.started
		if imaged {
			return errBoom
		}
		for len(snapshotsIn(t, first.dir)) == 0 { // the early stream's rename
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		// SIGKILL here: what is on disk is what the next agent finds.
		if err := os.CopyFS(image, os.DirFS(first.dir)); err != nil {
			t.Error(err)
		}
		imaged = true
		return errBoom
	}
	first.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	if _, err := os.Stat(filepath.Join(image, filepath.Base(journal.Path(first.dir, "m1")))); err != nil {
		t.Fatalf("no image of the killed agent's state: %v", err)
	}

	next := newRig(t, cluster3(memberstate.Lost, 2, 3))
	if err := os.CopyFS(next.dir, os.DirFS(image)); err != nil {
		t.Fatal(err)
	}
	// The same node: the journal's paths are the new agent's (each rig has
	// its own temp dir).
	jp := journal.Path(next.dir, "m1")
	b, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jp, bytes.ReplaceAll(b, []byte(first.dir), []byte(next.dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	orphans := snapshotsIn(t, next.dir)
	if len(orphans) != 1 {
		t.Fatalf("the killed agent left backups %v, want its one early backup", orphans)
	}
	if j := next.journal(t); !j.Active() || j.SnapshotPath != "" {
		t.Fatalf("the killed agent's journal: active %v, backup %q; want open, naming no backup", j.Active(), j.SnapshotPath)
	}
	var beside []string // backups there when the new agent's stream began
	next.h.streamTo = func(ctx context.Context, endpoint string, c *tls.Config, dest string, size uint64, n func(int64), o ...peerseed.StreamOption) (peerseed.Snapshot, error) {
		if beside == nil {
			beside = append([]string{}, snapshotsIn(t, next.dir)...)
		}
		return newFakeStreams().stream(ctx, endpoint, c, dest, size, n, o...)
	}
	next.cluster.removeErr = errBoom
	next.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	if beside == nil {
		t.Fatal("the resumed attempt streamed no backup")
	}
	if len(beside) != 0 {
		t.Errorf("backups beside the resumed attempt's stream: %v, want none (the orphan removed first)", beside)
	}
	// (The resumed stream may get the orphan's name: one second's stamp.)
	left := snapshotsIn(t, next.dir)
	if j := next.journal(t); len(left) != 1 || j.SnapshotPath != left[0] {
		t.Errorf("backups %v, the journal names %q: want only the resumed attempt's, named", left, j.SnapshotPath)
	}
}

// At the start the new agent removes exactly the backup its member's last
// journal streamed and did not take (open or closed), and the seed streams
// a killed agent left (transient, never taken across a restart); never the
// backup the journal names, an older recovery's, or another member's.
func TestAtTheStartOnlyTheLastJournalsUntakenBackupAndSeedStreamsGo(t *testing.T) {
	now := time.Now().UTC()
	for _, closed := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "closed"}[closed], func(t *testing.T) {
			res := cluster3(memberstate.Healthy, 1, 2, 3)
			r := newRig(t, res)
			q := r.h.cfg.QuarantineDir
			if err := os.MkdirAll(q, 0o700); err != nil {
				t.Fatal(err)
			}
			write := func(name string) string {
				p := filepath.Join(q, name)
				if err := os.WriteFile(p, []byte("db"), 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			stamp := func(d time.Duration) string { return now.Add(d).Format(localdisk.SnapshotStampLayout) }
			named := write("snapshot-m1-" + stamp(-time.Minute) + ".db")
			untaken := write("snapshot-m1-" + stamp(0) + ".db")
			seedStamp := now.Format(seedStampLayout)
			gone := []string{untaken, write("seed-m1-" + seedStamp + ".db"), write("seed-m1-" + seedStamp + ".db.seed.json")}
			kept := []string{
				named,
				write("snapshot-m1-" + stamp(-time.Hour) + ".db"), // an older recovery's backup
				write("snapshot-m10-" + stamp(0) + ".db"),         // another member's
				write("seed-m10-" + seedStamp + ".db"),
			}
			j := journal.Record{ID: "j1", Member: "m1", Node: "node1", Request: "auto", StartedAt: now.Add(-2 * time.Minute),
				BackupStreaming: untaken, SnapshotPath: named}
			j.Advance(journal.PhaseSnapshotted, now)
			if closed {
				j.Result, j.FinishedAt = journal.ResultFailed, now
				j.Advance(journal.PhaseDone, now)
			}
			if err := journal.Save(r.dir, j); err != nil {
				t.Fatal(err)
			}
			r.h.Housekeep(res)
			if left := present(gone); len(left) > 0 {
				t.Errorf("still there after the start: %v", left)
			}
			if left := present(kept); !slices.Equal(left, kept) {
				t.Errorf("kept %v, want all of %v", left, kept)
			}
			if n := testutil.ToFloat64(r.m.QuarantinePrunedTotal.WithLabelValues("m1")); n != 1 || !slices.Equal(r.rep.events, []string{nodereport.ReasonUntakenBackupRemoved}) {
				t.Errorf("counted %v, Events %v: want the removal counted once and said in one %s Event", n, r.rep.events, nodereport.ReasonUntakenBackupRemoved)
			}
		})
	}
}

// A journal that names a path outside this member's backups (hand-edited,
// or another version's) removes nothing.
func TestAnUntakenBackupOutsideTheMembersBackupsIsNeverRemoved(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	r := newRig(t, res)
	for _, p := range []string{
		filepath.Join(r.dir, "data", "member", "snap", "db"),
		filepath.Join(r.h.cfg.QuarantineDir, "snapshot-m10-"+time.Now().UTC().Format(localdisk.SnapshotStampLayout)+".db"),
		filepath.Join(r.h.cfg.QuarantineDir, "quarantine-m1-x", "member", "snap", "db"),
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("db"), 0o600); err != nil {
			t.Fatal(err)
		}
		j := journal.Record{ID: "j1", Member: "m1", Request: "auto", StartedAt: time.Now().UTC(), BackupStreaming: p}
		j.Advance(journal.PhaseStopped, time.Now().UTC())
		if err := journal.Save(r.dir, j); err != nil {
			t.Fatal(err)
		}
		r.h.killedStreamsRemoved = false // a new start
		r.h.Housekeep(res)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s removed", p)
		}
	}
}
