package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFailedAttemptBeforeTheRemoveRestartsTheMember (issue 10 item 4): a
// manual rejoin of healthy node2 stops it (its manifest parked), then its
// quarantine cannot be created (a regular file stands where the quarantine
// dir goes), so the attempt fails after the stop and before anything was
// removed. The member's data dir is intact and its ID still in the member
// list: the failed attempt puts it back (manifest un-parked) under its own
// ID, the journal and an Event say so, and the cluster never lost quorum.
// Before, the member was left stopped, the cluster at zero fault tolerance.
// Then, the quarantine unblocked, the same request rejoins node2 with every
// step fenced on the real Lease.
func TestFailedAttemptBeforeTheRemoveRestartsTheMember(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--auto-heal=false"}})
	waitAgentState(t, l, "node2", "healthy", "ok", 30*time.Second)
	ensureNotLeader(t, l, "node2")
	n := nodeOf(t, l, "node2")
	blocker := filepath.Join(filepath.Dir(n.DataDir), "etcd-agent-quarantine")
	if err := os.WriteFile(blocker, []byte("not a directory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHeal(t, l)
	before := idsByPeer(mustMembers(t, l))
	p2 := peerOf(t, l, "node2")

	h.fault()
	annotate(t, h.kc, "node2", map[string]any{nodereport.AnnotationRecover: "rejoin"})
	lr, raw := waitLastRecovery(t, h.kc, "node2", "", 2*time.Minute)
	if lr.Result != nodereport.ResultFailed || !strings.Contains(lr.Message, "quarantine") {
		t.Fatalf("last-recovery %s: want a failed rejoin (the quarantine could not be made)", raw)
	}
	j, ok := loadJournal(t, l, "node2", "node2")
	if !ok || j.StopAttemptedAt.IsZero() || j.QuarantinePath != "" || !strings.HasPrefix(j.PutBack, "restarted:") {
		t.Fatalf("journal (found %v): stop attempted %s, quarantine %q, putBack %q; want the stopped member restarted",
			ok, j.StopAttemptedAt, j.QuarantinePath, j.PutBack)
	}
	t.Logf("putBack: %s", j.PutBack)
	if _, err := os.Stat(n.EtcdManifest()); err != nil {
		t.Fatalf("etcd manifest not back in the manifests dir: %v", err)
	}
	waitAgentState(t, l, "node2", "healthy", "ok", time.Minute)
	if after := idsByPeer(mustMembers(t, l)); after[p2] != before[p2] || len(after) != len(before) {
		t.Fatalf("member list changed: before %v, after %v; want node2 back under its own ID %x", before, after, before[p2])
	}
	eventually(t, 10*time.Second, "a MemberRestarted Event on node2", func() error {
		evs, err := h.kc.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=node2,reason=" + nodereport.ReasonMemberRestarted})
		if err != nil {
			return err
		}
		if len(evs.Items) == 0 {
			return fmt.Errorf("no MemberRestarted Event")
		}
		return nil
	})
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	// With the quarantine possible again, the same request heals: every
	// step (stop, quarantine, remove, add, promote) passes its fence on the
	// lab's 15 s Lease, renewed where less was left than the step's timeout.
	annotate(t, h.kc, "node2", map[string]any{nodereport.AnnotationRecover: "rejoin"})
	lr, raw = waitLastRecovery(t, h.kc, "node2", raw, 2*time.Minute)
	if lr.Result != nodereport.ResultSucceeded {
		t.Fatalf("second rejoin: last-recovery %s, want succeeded", raw)
	}
	j = h.waitHealed("node2", "node2", 3, 30*time.Second)
	if after := idsByPeer(mustMembers(t, l)); after[p2] == before[p2] || after[p2] != uint64(j.NewMemberID) {
		t.Fatalf("second rejoin: node2's member %x (before %x, journal new %x): want a new ID", after[p2], before[p2], uint64(j.NewMemberID))
	}
	rep := h.finish(invariantDefaults())
	t.Logf("put back, then rejoined: %d membership states seen", len(rep.Memberships))
}
