package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The seed-mode scenarios that need the heal stopped at one moment use the
// agent's hold hook (heal.HoldAtFailpoint): the agent logs "test hook:
// holding" and waits for a release file in its state dir.

// wipeHeldAt starts a seed-mode lab of etcd e whose agents hold at point,
// wipes node2's data dir (node2 is not the leader) and waits until node2's
// agent holds there; the invariant checker runs from before the wipe.
func wipeHeldAt(t *testing.T, e etcdUnderTest, point string, extra ...string) (*lab.Lab, *healRun) {
	t.Helper()
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdBinary: e.binary,
		AgentArgs: append([]string{"--rejoin-mode=seed"}, extra...), Failpoints: []string{heal.HoldAtFailpoint(point)}})
	requireVersion(t, l, e.version)
	h := wipeNode2(t, l)
	waitHold(t, l, "node2", point)
	return l, h
}

// waitHold waits until node's agent holds at point.
func waitHold(t *testing.T, l *lab.Lab, node, point string) {
	t.Helper()
	eventually(t, 90*time.Second, node+"'s agent holds at "+point, func() error {
		path := agentLog(t, l, node)
		if _, err := os.Stat(path); err != nil {
			return err // a node just added: its agent has not logged yet
		}
		for _, e := range logEntries(t, path, "test hook: holding") {
			if e["point"] == point {
				return nil
			}
		}
		return fmt.Errorf("not held yet")
	})
}

// release lets node's agent pass point (now and after any restart).
func release(t *testing.T, l *lab.Lab, node, point string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(nodeOf(t, l, node).StateDir, "test-release-"+point), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func snapshotsSent(t *testing.T, l *lab.Lab) float64 {
	t.Helper()
	n, err := l.SnapshotsSent(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// seededAt is the consistent index of the seed node's agent built, from
// its log.
func seededAt(t *testing.T, l *lab.Lab, node string) uint64 {
	t.Helper()
	es := logEntries(t, agentLog(t, l, node), "seeded learner data dir from the snapshot")
	if len(es) == 0 {
		t.Fatalf("%s's agent logged no seeded data dir", node)
	}
	ci, _ := es[len(es)-1]["consistent-index"].(float64)
	if ci == 0 {
		t.Fatalf("seeded data dir without a consistent index: %v", es[len(es)-1])
	}
	return uint64(ci)
}

// TestSeedModeLearnerStartedAfterTheLeaderCompactedGetsASnapshot: the seed
// is built, then enough entries are written before the learner starts that
// the leader has compacted its log past the seed's index (etcdUnderTest.
// entriesToCompactPast).
// The leader then sends a raft snapshot, which replaces the seed: healed and
// correct, just without seed mode's gain.
func TestSeedModeLearnerStartedAfterTheLeaderCompactedGetsASnapshot(t *testing.T) {
	_, h := seedThenCompactedLeaderSendsSnapshot(t, etcd36)
	h.finish(invariantDefaults())
}

// seedThenCompactedLeaderSendsSnapshot is that scenario on etcd e; the
// caller finishes h.
func seedThenCompactedLeaderSendsSnapshot(t *testing.T, e etcdUnderTest) (*lab.Lab, *healRun) {
	t.Helper()
	l, h := wipeHeldAt(t, e, "member-start")
	ci := seededAt(t, l, "node2")
	before := snapshotsSent(t, l)
	n := e.entriesToCompactPast()
	written := putMany(t, h.cli, n)
	st, err := h.cli.Status(context.Background(), l.Spec.ClientURLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded at index %d; %d entries written while the learner was held, raft index now %d", ci, written, st.RaftIndex)
	if st.RaftIndex < ci+uint64(n) {
		t.Fatalf("raft index %d is not %d past the seed's %d", st.RaftIndex, n, ci)
	}
	release(t, l, "node2", "member-start")
	j := h.waitHealed("node2", "node2", 3, 120*time.Second)
	if j.RejoinMode != "seed" || j.SeedIndex != ci {
		t.Fatalf("journal: mode %q seed index %d, want seed at %d", j.RejoinMode, j.SeedIndex, ci)
	}
	sent := snapshotsSent(t, l) - before
	t.Logf("raft snapshots sent after the release: %v", sent)
	if sent < 1 {
		t.Fatalf("the leader sent no raft snapshot to a learner %d entries behind its compacted log", st.RaftIndex-ci)
	}
	return l, h
}

// putMany writes n keys straight to etcd, 8 at a time, and returns n.
func putMany(t *testing.T, cli *clientv3.Client, n int) int {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cli.Put(ctx, fmt.Sprintf("/e2e-fill/%06d", i), strings.Repeat("v", 100))
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("fill write: %v", err)
	}
	return n
}

// TestSeedModeCorruptedSeedFallsBackToRaft: one byte of the streamed,
// verified seed snapshot (a second stream off a follower after the add:
// --seed-from-backup=false) is flipped on disk before the data dir is built.
// The build refuses it (snapshot-hash-mismatch), the agent falls back to
// raft mode (metric, journal, Event) and the member heals from the leader's
// raft snapshot.
func TestSeedModeCorruptedSeedFallsBackToRaft(t *testing.T) {
	l, h := wipeHeldAt(t, etcd36, "seed-streamed", "--seed-from-backup=false")
	n := nodeOf(t, l, "node2")
	seeds, _ := filepath.Glob(filepath.Join(filepath.Dir(n.DataDir), "etcd-agent-quarantine", "seed-*.db"))
	if len(seeds) != 1 {
		t.Fatalf("want one streamed seed in the quarantine, found %v", seeds)
	}
	flipByte(t, seeds[0])
	before := snapshotsSent(t, l)
	release(t, l, "node2", "seed-streamed")
	j := h.waitHealed("node2", "node2", 3, 120*time.Second)
	t.Logf("rejoin mode %q, fallback %q: %s", j.RejoinMode, j.SeedFallback, j.SeedDetail)
	if j.RejoinMode != "raft" || j.SeedFallback != "snapshot-hash-mismatch" {
		t.Fatalf("journal: mode %q fallback %q (%s), want raft after snapshot-hash-mismatch", j.RejoinMode, j.SeedFallback, j.SeedDetail)
	}
	if v, err := metricValue(l, "node2", "etcd_agent_seed_fallbacks_total", map[string]string{"reason": "snapshot-hash-mismatch"}); err != nil || v != 1 {
		t.Fatalf("etcd_agent_seed_fallbacks_total{reason=snapshot-hash-mismatch} = %v (%v), want 1", v, err)
	}
	if sent := snapshotsSent(t, l) - before; sent < 1 {
		t.Fatalf("raft mode, yet the leader sent %v raft snapshots", sent)
	}
	waitSeedFallbackEvent(t, l, "node2", "snapshot-hash-mismatch")
	if _, err := os.Stat(seeds[0]); !os.IsNotExist(err) {
		t.Errorf("the refused seed %s is still there (%v)", seeds[0], err)
	}
	// `etcd-agent status` on the node says so too.
	out, err := exec.Command(agentBinary, "status", "-o", "json", "--static-pod-manifest", n.EtcdManifest(), "--state-dir", n.StateDir,
		"--endpoints", strings.Join(l.Spec.ClientURLs(), ","), "--poll-interval=1s").Output()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	var st struct {
		LastRecovery struct {
			Result, RejoinMode, SeedFallback string
		} `json:"lastRecovery"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if lr := st.LastRecovery; lr.Result != "succeeded" || lr.RejoinMode != "raft" || lr.SeedFallback != "snapshot-hash-mismatch" {
		t.Fatalf("status lastRecovery %+v, want succeeded in raft mode after snapshot-hash-mismatch", lr)
	}
	assertQuarantine(t, l, "node2", j)
	h.finish(invariantDefaults())
}

// TestSeedModeCorruptBackupIsNotTheSeed: the learner is seeded from a copy
// of the recovery's pre-change backup (the default): the copy its stream
// wrote beside it, or (--seed-copy-during-stream=false) one made from the
// backup after the add. One byte of the db the seed comes from is flipped
// on disk before it is moved or copied in: its sha256 differs from the one
// journaled when the backup was streamed, so it is refused as a seed (a
// Warning Event naming snapshot-hash-mismatch), and the learner is seeded
// from a second stream off a follower instead, still in seed mode.
func TestSeedModeCorruptBackupIsNotTheSeed(t *testing.T) {
	for _, c := range []struct {
		name   string
		args   []string
		copied bool // the stream wrote the seed's copy
	}{
		{"the copy written during the stream", nil, true},
		{"the backup copied after the add", []string{"--seed-copy-during-stream=false"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, h := wipeHeldAt(t, etcd36, "seed-streamed", c.args...)
			n := nodeOf(t, l, "node2")
			j, ok := loadJournal(t, l, "node2", "node2")
			if !ok || j.SnapshotPath == "" {
				t.Fatalf("no pre-change backup journaled while held at seed-streamed: %+v", j)
			}
			seeds, _ := filepath.Glob(filepath.Join(filepath.Dir(n.DataDir), "etcd-agent-quarantine", "seed-*.db"))
			rot := j.SnapshotPath
			if c.copied {
				if len(seeds) != 1 {
					t.Fatalf("seed streams %v: want the one copy the backup's stream wrote, and no stream after the add", seeds)
				}
				rot = seeds[0]
			} else if len(seeds) > 0 {
				t.Fatalf("a seed was streamed (%v): the backup should be the seed", seeds)
			}
			flipByte(t, rot)
			release(t, l, "node2", "seed-streamed")
			j = h.waitHealed("node2", "node2", 3, 120*time.Second)
			t.Logf("rejoin mode %q, fallback %q, seed source %q", j.RejoinMode, j.SeedFallback, j.SeedSource)
			if j.RejoinMode != "seed" || j.SeedFallback != "" || strings.HasPrefix(j.SeedSource, "backup:") || j.SeedSource == "" {
				t.Fatalf("journal: mode %q fallback %q source %q: want seeded from a follower's stream", j.RejoinMode, j.SeedFallback, j.SeedSource)
			}
			waitSeedFallbackEvent(t, l, "node2", "pre-change backup", "snapshot-hash-mismatch")
			// Counted like any refused seed: EtcdAgentSeedSnapshotCorrupt fires for a backup that rotted.
			if v, err := metricValue(l, "node2", "etcd_agent_seed_fallbacks_total", map[string]string{"reason": "snapshot-hash-mismatch"}); err != nil || v != 1 {
				t.Fatalf("etcd_agent_seed_fallbacks_total{reason=snapshot-hash-mismatch} = %v (%v), want 1", v, err)
			}
			h.finish(invariantDefaults())
		})
	}
}

// waitSeedFallbackEvent waits for a SeedFallback Warning Event on node
// whose message says every one of says.
func waitSeedFallbackEvent(t *testing.T, l *lab.Lab, node string, says ...string) {
	t.Helper()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a SeedFallback Warning Event on "+node+" saying "+strings.Join(says, ", "), func() error {
		evs, err := kc.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=SeedFallback"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Type == "Warning" && !slices.ContainsFunc(says, func(w string) bool { return !strings.Contains(e.Message, w) }) {
				return nil
			}
		}
		return fmt.Errorf("%d SeedFallback events, none a Warning saying %v", len(evs.Items), says)
	})
}

// flipByte flips one bit in the middle of the file at path.
func flipByte(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	off := st.Size() / 2
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestSeedModeAgentKilledMidBuildResumes: the agent is SIGKILLed while the
// seeded data dir (from a copy of the pre-change backup) is complete in its
// temp dir but not yet renamed into place. etcd never runs meanwhile (the
// data dir does not exist), the restarted agent resumes the recovery,
// removes the temp dir, seeds again, this time from a follower's stream (a
// resumed attempt no longer trusts its backup: another agent may have held
// the Lease meanwhile), and the member heals; etcd restarts exactly at the
// second seed's index. The backup is kept as it was, with nothing left
// beside it.
func TestSeedModeAgentKilledMidBuildResumes(t *testing.T) {
	l, h := wipeHeldAt(t, etcd36, "seed-rename")
	n := nodeOf(t, l, "node2")
	temps, _ := filepath.Glob(n.DataDir + ".seed-tmp-*")
	if len(temps) != 1 {
		t.Fatalf("want one seed temp dir while held, found %v", temps)
	}
	if _, err := os.Lstat(n.DataDir); !os.IsNotExist(err) {
		t.Fatalf("the data dir exists before the rename: %v", err)
	}
	if pid, err := l.EtcdPID("node2"); err == nil {
		t.Fatalf("etcd runs (pid %d) while its data dir is being built", pid)
	}
	// The killed attempt builds from its backup: from the copy its stream
	// wrote (moved into the temp dir by now), whose provenance record
	// stays in the quarantine.
	if held, ok := loadJournal(t, l, "node2", "node2"); !ok || !held.BackupSeeds || held.SnapshotPath == "" {
		t.Fatalf("held mid-build, the journal does not let the backup seed: %+v", held)
	} else if recs, _ := filepath.Glob(filepath.Join(filepath.Dir(n.DataDir), "etcd-agent-quarantine", "seed-node2-*.db.seed.json")); len(recs) != 1 {
		t.Fatalf("held mid-build, provenance records of the backup's copy: %v, want one", recs)
	}
	pid, err := l.AgentPID("node2")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("agent pid %d killed mid-build; temp dir %s", pid, temps[0])
	release(t, l, "node2", "seed-rename")
	j := h.waitHealed("node2", "node2", 3, 120*time.Second)
	if j.RejoinMode != "seed" || j.SeedFallback != "" {
		t.Fatalf("journal: mode %q fallback %q (%s), want seed", j.RejoinMode, j.SeedFallback, j.SeedDetail)
	}
	if resumed := logEntries(t, agentLog(t, l, "node2"), "recovery resumed"); len(resumed) < 1 {
		t.Fatalf("the restarted agent did not resume the recovery")
	}
	if strings.HasPrefix(j.SeedSource, "backup:") || j.SeedSource == "" || j.BackupSeeds {
		t.Fatalf("resumed seed from %q (backupSeeds %v): want a follower's stream", j.SeedSource, j.BackupSeeds)
	}
	if sum := fileSHA256(t, j.SnapshotPath); sum != j.SnapshotSHA256 {
		t.Fatalf("the pre-change backup changed: sha256 %s, journaled %s", sum, j.SnapshotSHA256)
	}
	assertNothingBeside(t, j.SnapshotPath)
	if left, _ := filepath.Glob(n.DataDir + ".seed-tmp-*"); len(left) > 0 {
		t.Fatalf("seed temp dirs left: %v", left)
	}
	if _, err := os.Stat(temps[0]); !os.IsNotExist(err) {
		t.Fatalf("the killed build's temp dir %s is still there (%v)", temps[0], err)
	}
	if seeds, _ := filepath.Glob(filepath.Join(filepath.Dir(n.DataDir), "etcd-agent-quarantine", "seed-*")); len(seeds) > 0 {
		t.Fatalf("seed streams left in the quarantine (the killed run's or the resumed one's): %v", seeds)
	}
	// etcd started once on node2 since the wipe, on the second seed.
	logs, _ := filepath.Glob(filepath.Join(n.LogsDir, "etcd-*etcd.log"))
	var starts []string
	for _, p := range logs {
		for _, e := range logEntries(t, p, "restarting local member") {
			if entryTime(t, e).After(h.faultAt) {
				ci, _ := e["commit-index"].(float64)
				starts = append(starts, fmt.Sprintf("%v@%d", e["local-member-id"], uint64(ci)))
			}
		}
	}
	want := fmt.Sprintf("%x@%d", uint64(j.NewMemberID), j.SeedIndex)
	if len(starts) != 1 || starts[0] != want {
		t.Fatalf("etcd restarts on node2 since the fault: %v, want exactly [%s] (the resumed seed)", starts, want)
	}
	assertQuarantine(t, l, "node2", j)
	h.finish(invariantDefaults())
}
