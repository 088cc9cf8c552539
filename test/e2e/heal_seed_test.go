package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// TestHealWipedDataDirSeedMode: as TestHealWipedDataDirOfRunningMember, with
// --rejoin-mode=seed: the agent builds the learner's data dir from a copy of
// the pre-change backup (the db streamed once; the old member taken out of
// the copy, the learner written in), so etcd restarts at the snapshot's
// index ("restarting local member") instead of starting empty and receiving
// a raft snapshot. The backup is kept as it was streamed.
func TestHealWipedDataDirSeedMode(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--rejoin-mode=seed"}})
	h, j := seededWipeHeal(t, l)
	n := nodeOf(t, l, "node2")
	logs, _ := filepath.Glob(filepath.Join(n.LogsDir, "etcd-*etcd.log"))
	want := fmt.Sprintf(`"local-member-id":"%x","commit-index":%d`, uint64(j.NewMemberID), j.SeedIndex)
	found := false
	for _, p := range logs {
		b, _ := os.ReadFile(p)
		found = found || (strings.Contains(string(b), `"restarting local member"`) && strings.Contains(string(b), want))
	}
	if !found {
		t.Errorf("node2's etcd logs %v lack \"restarting local member\" with %s", logs, want)
	}
	if seeds, _ := filepath.Glob(filepath.Join(filepath.Dir(n.DataDir), "etcd-agent-quarantine", "seed-*")); len(seeds) > 0 {
		t.Errorf("seed streams left in the quarantine: %v", seeds)
	}
	if j.SeedSource != "backup:"+j.SnapshotSource {
		t.Errorf("seeded from %q, want a copy of the pre-change backup (backup:%s): one stream of the db", j.SeedSource, j.SnapshotSource)
	}
	if sum := fileSHA256(t, j.SnapshotPath); sum != j.SnapshotSHA256 {
		t.Errorf("the pre-change backup %s changed: sha256 %s, journaled %s", j.SnapshotPath, sum, j.SnapshotSHA256)
	}
	assertNothingBeside(t, j.SnapshotPath)
	// The backup was not copied after the add: its copy, written during its
	// stream, was moved in; and the backup streamed while the member stopped.
	seeded := logEntries(t, agentLog(t, l, "node2"), "learner data dir seeded from a db older than its add")
	if len(seeded) != 1 || seeded[0]["moved"] != true || seeded[0]["source"] != "backup:"+j.SnapshotSource {
		t.Errorf("node2's agent seeded %v: want once, from the backup's copy moved in (\"moved\":true, source backup:%s)", seeded, j.SnapshotSource)
	}
	if early := logEntries(t, agentLog(t, l, "node2"), "streaming the pre-change backup while the member stops"); len(early) != 1 {
		t.Errorf("node2's agent streamed the backup during the stop %d times, want once", len(early))
	}
	// Its etcd, serving from open files of a data dir gone, did not wait out
	// its graceful stop (7 s for the API server's watches): the gate's stop
	// watch ended it once no request was in flight (nothing to flush).
	if ended := stopWatchSays(t, l, "node2", "etcd ended without its graceful wait"); len(ended) != 1 {
		t.Errorf("node2's stop watch ended etcd %d times, want once (the stop of the wiped member)", len(ended))
	} else {
		t.Logf("stop watch: etcd ended %.3fs after it began stopping", ended[0]["stoppingFor"])
	}
	assertQuarantine(t, l, "node2", j)
	h.finish(invariant.Options{})
}

// seededWipeHeal wipes node2's data dir (node2 is not the leader) under the
// invariant checker and waits for the heal. It fails unless the heal was
// seeded and no member sent a raft snapshot (every member's
// etcd_network_snapshot_send_success, before and after): the point of seed
// mode. The caller finishes h.
func seededWipeHeal(t *testing.T, l *lab.Lab) (*healRun, journal.Record) {
	t.Helper()
	snapsBefore := snapshotsSent(t, l)
	waitStopWatchConnected(t, l, "node2") // its stop is to end early
	h := wipeNode2(t, l)
	j := h.waitHealed("node2", "node2", 3, 2*time.Minute)
	t.Logf("rejoin mode %q (fallback %q %s), seeded at index %d term %d from %s", j.RejoinMode, j.SeedFallback, j.SeedDetail,
		j.SeedIndex, j.SeedTerm, j.SeedSource)
	if j.RejoinMode != "seed" || j.SeedFallback != "" || j.SeedIndex == 0 || j.SeedTerm == 0 {
		t.Fatalf("want a seeded rejoin, journal says mode %q fallback %q: %s", j.RejoinMode, j.SeedFallback, j.SeedDetail)
	}
	if sent := snapshotsSent(t, l) - snapsBefore; sent != 0 {
		t.Fatalf("%v raft snapshots sent during a seeded heal, want 0", sent)
	}
	return h, j
}

// assertNothingBeside: no file sits beside the backup at path (its seed
// provenance record, or that record's temp file).
func assertNothingBeside(t *testing.T, path string) {
	t.Helper()
	left, _ := filepath.Glob(path + ".*")
	hidden, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"*"))
	if len(left)+len(hidden) > 0 {
		t.Errorf("files left beside the backup %s: %v %v", path, left, hidden)
	}
}

// fileSHA256 is the hex sha256 of the file at path.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
