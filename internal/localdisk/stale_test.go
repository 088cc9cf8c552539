package localdisk

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestClassifyReportsStaleForAnOlderCopyOfTheMembersOwnData (issue 15,
// UC2): a copy of a real member's data dir taken before more writes is
// behind the progress the member reported afterwards (Status: term and
// commit index): stale. The newer data dir, stopped cleanly, holds what the
// member reported (no false stale), and a mark of another member says
// nothing of the copy.
func TestClassifyReportsStaleForAnOlderCopyOfTheMembersOwnData(t *testing.T) {
	onEtcdBinaries(t, classifyReportsStaleForAnOlderCopyOfTheMembersOwnData)
}

func classifyReportsStaleForAnOlderCopyOfTheMembersOwnData(t *testing.T, bin string) {
	root := t.TempDir()
	m := makeStoppedMemberWith(t, bin, root, "uc2")
	old := filepath.Join(root, "uc2-old")
	if err := copyTree(m.dataDir, old); err != nil {
		t.Fatal(err)
	}
	p := startEtcdWith(t, bin, m.dataDir, "uc2")
	p.writeKeys(t, 200)
	cli := p.client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	st, err := cli.Status(ctx, p.Endpoint)
	cancel()
	cli.Close()
	if err != nil {
		t.Fatal(err)
	}
	p.stop(t)
	hw := HighWater{MemberID: m.id.memberID, Term: st.RaftTerm, Index: st.RaftIndex}
	t.Logf("member %x reported term %d, commit index %d", m.id.memberID, st.RaftTerm, st.RaftIndex)

	r := classifyNow(t, old, Expect{MemberID: m.id.memberID, ClusterID: m.id.clusterID, HighWater: hw})
	requireClass(t, r, ClassStale, "went back in time", hexID(m.id.memberID))
	if r.WALIndex >= hw.Index || r.MemberID != m.id.memberID {
		t.Fatalf("stale copy: WAL index %d member %x, want below %d and member %x", r.WALIndex, r.MemberID, hw.Index, m.id.memberID)
	}
	cur := classifyNow(t, m.dataDir, Expect{MemberID: m.id.memberID, ClusterID: m.id.clusterID, HighWater: hw})
	requireClass(t, cur, ClassOK)
	if cur.WALIndex < hw.Index || cur.WALTerm < hw.Term {
		t.Fatalf("current data dir: WAL index %d term %d, below what the member reported (%d, %d)", cur.WALIndex, cur.WALTerm, hw.Index, hw.Term)
	}
	// The commit a restore from it keeps (--force-new-cluster) is what the
	// member said it had committed; the old copy's is behind it.
	if cur.WALCommit < hw.Index || cur.WALCommit > cur.WALIndex || cur.WALCommit < cur.ConsistentIndex {
		t.Fatalf("current data dir: WAL commit %d, want at least the reported %d, within applied %d and last index %d",
			cur.WALCommit, hw.Index, cur.ConsistentIndex, cur.WALIndex)
	}
	if cur.Revision < 200 || r.Revision == 0 || r.Revision >= cur.Revision {
		t.Fatalf("revisions: the current data dir's %d (200 keys written), the old copy's %d: want the copy's above 0 and below", cur.Revision, r.Revision)
	}
	if r.WALCommit == 0 || r.WALCommit >= hw.Index {
		t.Fatalf("stale copy: WAL commit %d, want above 0 and below %d", r.WALCommit, hw.Index)
	}
	other := hw
	other.MemberID++
	requireClass(t, classifyNow(t, old, Expect{ClusterID: m.id.clusterID, HighWater: other}), ClassOK)
	ahead := HighWater{MemberID: m.id.memberID, Term: cur.WALTerm + 1, Index: 1}
	requireClass(t, classifyNow(t, m.dataDir, Expect{HighWater: ahead}), ClassStale, "term")
}
