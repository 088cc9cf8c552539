package localdisk

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// ReadRaftPosition reads a WAL etcd is writing, without a lock: a member
// that runs but does not serve has no other witness of its log (issue 44).
func TestReadRaftPositionWhileEtcdRuns(t *testing.T) {
	onEtcdBinaries(t, readRaftPositionWhileEtcdRuns)
}

func readRaftPositionWhileEtcdRuns(t *testing.T, bin string) {
	root := t.TempDir()
	m := makeStoppedMemberWith(t, bin, root, "held")
	p := startEtcdWith(t, bin, m.dataDir, "held")
	p.writeKeys(t, 100)
	cli := p.client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	st, err := cli.Status(ctx, p.Endpoint)
	cancel()
	cli.Close()
	if err != nil {
		t.Fatal(err)
	}
	pos, err := ReadRaftPosition(DataDirOnly(m.dataDir))
	if err != nil {
		t.Fatalf("read the WAL of a running member: %v", err)
	}
	// The hard state's commit is written with the next round's entries:
	// it may trail what the member says by the last round.
	if pos.MemberID != m.id.memberID || pos.Commit == 0 || pos.Commit > pos.LastIndex || pos.LastIndex < st.RaftIndex || pos.Term != st.RaftTerm {
		t.Fatalf("read %+v; the member says term %d, commit %d (member %x)", pos, st.RaftTerm, st.RaftIndex, m.id.memberID)
	}
	// The same read in the inspection child (what /status runs).
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	iso, err := ReadRaftPositionIsolated(ctx, DataDirOnly(m.dataDir))
	cancel()
	if err != nil || iso.MemberID != pos.MemberID || iso.Term != pos.Term || iso.Commit < pos.Commit || iso.LastIndex < pos.LastIndex {
		t.Fatalf("read in the child: %+v, %v; in process %+v", iso, err, pos)
	}
	p.stop(t)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ReadRaftPositionIsolated(ctx, DataDirOnly(filepath.Join(root, "nothing-here"))); err == nil {
		t.Fatal("a WAL that is not there was read")
	}
}
