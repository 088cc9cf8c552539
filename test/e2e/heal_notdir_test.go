package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// labRecoveryTimeout is the lab agents' --recovery-timeout (agentpod.go).
const labRecoveryTimeout = 3 * time.Minute

// TestHealDataDirReplacedByFile (issue 38): node2's data dir is replaced by
// a regular file while its etcd runs. Its db lock cannot be checked, so the
// stop must conclude from the listen URLs that etcd is gone instead of
// waiting for a lock it can never see. The heal succeeds within the
// recovery timeout with no API write failed and HashKV equal; the file is
// kept in the quarantine (never deleted) and the learner gets a fresh dir.
func TestHealDataDirReplacedByFile(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true})
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2")
	h := startHeal(t, l)
	h.fault()
	content, err := l.ReplaceDataDirWithFile("node2")
	if err != nil {
		t.Fatal(err)
	}
	j := h.waitHealed("node2", "node2", 3, labRecoveryTimeout)
	if ttr := j.FinishedAt.Sub(h.faultAt); ttr > labRecoveryTimeout {
		t.Fatalf("TTR %s, want within the recovery timeout %s", ttr, labRecoveryTimeout)
	}
	p2 := peerOf(t, l, "node2")
	if after := idsByPeer(mustMembers(t, l)); after[p2] == before[p2] || after[p2] != uint64(j.NewMemberID) {
		t.Fatalf("node2's member: before %x, after %x, journal new %x: want the new member ID", before[p2], after[p2], uint64(j.NewMemberID))
	}
	assertQuarantine(t, l, "node2", j)
	// Rule 8: the file itself is in the quarantine, unchanged.
	if fi, err := os.Lstat(j.QuarantinePath); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("quarantined data dir %q: %v (mode %v), want the regular file the fault left", j.QuarantinePath, err, fi)
	}
	if got, err := os.ReadFile(j.QuarantinePath); err != nil || string(got) != content {
		t.Fatalf("quarantined file %s holds %q (%v), want the fault's %q", j.QuarantinePath, got, err, content)
	}
	if fi, err := os.Stat(nodeOf(t, l, "node2").DataDir); err != nil || !fi.IsDir() {
		t.Fatalf("node2's data dir after the heal: %v (%v), want a directory", fi, err)
	}
	// The log says why at every step: the class, and how the stop was told.
	log, err := os.ReadFile(agentLog(t, l, "node2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"not-a-directory", "the listen URLs decide"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("node2's agent log never says %q", want)
		}
	}
	h.finish(invariant.Options{})
}
