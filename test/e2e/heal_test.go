package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// TestHealWipedDataDirOfRunningMember: node2's data dir is wiped while its
// etcd runs (serving, not healthy). The agent waits out the grace period,
// then rejoins it: remove → learner → promote, under API write load with no
// failed write. The member comes back under a new ID. In raft mode (seed
// mode, the default, has its own scenarios): the learner starts empty.
func TestHealWipedDataDirOfRunningMember(t *testing.T) {
	healWipedDataDirOfRunningMember(t, etcd36)
}

// healWipedDataDirOfRunningMember is that scenario on etcd e.
func healWipedDataDirOfRunningMember(t *testing.T, e etcdUnderTest) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--rejoin-mode=raft"}, EtcdBinary: e.binary})
	requireVersion(t, l, e.version)
	before := idsByPeer(mustMembers(t, l))
	h := wipeNode2(t, l)
	j := h.waitHealed("node2", "node2", 3, 90*time.Second)
	if j.RejoinMode != "raft" {
		t.Fatalf("rejoin mode %q, want raft as asked", j.RejoinMode)
	}
	after := idsByPeer(mustMembers(t, l))
	p2 := peerOf(t, l, "node2")
	if after[p2] == 0 || after[p2] == before[p2] || uint64(j.NewMemberID) != after[p2] || uint64(j.OldMemberID) != before[p2] {
		t.Fatalf("node2's member: before %x, after %x; journal old %x new %x: want a new member ID", before[p2], after[p2], uint64(j.OldMemberID), uint64(j.NewMemberID))
	}
	for _, n := range []string{"node1", "node3"} {
		if p := peerOf(t, l, n); after[p] != before[p] {
			t.Fatalf("%s's member changed ID %x → %x: only node2 may be replaced", n, before[p], after[p])
		}
	}
	assertQuarantine(t, l, "node2", j)
	h.finish(invariant.Options{})
}

// TestHealCorruptDBOfCrashLoopingMember: node2's db is corrupted while it is
// stopped, then it is started again: etcd cannot run on it (the start gate
// holds it back; without the gate etcd would crash-loop). The member is lost
// at once (rule 6: no grace for a corrupt data dir that does not serve) and
// rejoined; the corrupt data dir is kept in the quarantine. The grace period
// is an hour so that only the at-once rule can explain the heal (a stop under
// API load takes etcd seconds, longer than the lab's 3 s grace).
func TestHealCorruptDBOfCrashLoopingMember(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, AgentArgs: []string{"--grace-period=1h"}})
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2")
	h := startHeal(t, l)
	if err := l.StopMember("node2"); err != nil {
		t.Fatal(err)
	}
	waitAgentState(t, l, "node2", "down", "ok", 10*time.Second)
	h.fault()
	if err := l.CorruptDB("node2"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartMember("node2"); err != nil {
		t.Fatal(err)
	}
	j := h.waitHealed("node2", "node2", 3, 90*time.Second)
	after := idsByPeer(mustMembers(t, l))
	p2 := peerOf(t, l, "node2")
	if after[p2] == before[p2] || uint64(j.NewMemberID) != after[p2] {
		t.Fatalf("node2's member: before %x, after %x, journal new %x: want a new member ID", before[p2], after[p2], uint64(j.NewMemberID))
	}
	// etcd never ran on the corrupt data dir: the gate held it, or the
	// agent parked the manifest before the gate had decided.
	if s := etcdStarts(t, l, "node2", h.faultAt, j.PhaseTimes[journal.PhasePrepared]); len(s) > 0 {
		t.Fatalf("etcd started on node2's corrupt data dir at %s, before the agent prepared a new one", s[0].Format(time.RFC3339Nano))
	}
	if holds := logEntries(t, filepath.Join(nodeOf(t, l, "node2").LogsDir, "etcd-node2_etcd.log"), "start gate holds etcd back"); len(holds) > 0 {
		t.Logf("gate: %v (%v)", holds[0]["reason"], holds[0]["class"])
	}
	// The corrupt db and the WAL are kept, not deleted.
	assertQuarantine(t, l, "node2", j, "member/snap/db", "member/wal/*.wal")
	h.finish(invariant.Options{})
}

// TestHealUC1MemberMovedToNewNode: node3 is lost for good with its disk (UC1);
// its member is placed on a new node4 with empty local storage. node4's agent
// rejoins it from the surviving peers. etcd never runs on node4 before the
// agent has prepared the data dir: the start gate holds it back meanwhile.
// The agents hold once they have the Lease until node4's gate has held: how
// soon node4's container starts is up to its supervisor, and one that starts
// after the heal (as once in CI) has nothing left to hold back.
func TestHealUC1MemberMovedToNewNode(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, Failpoints: []string{heal.HoldAtFailpoint(heal.HoldLeaseAcquired)}})
	release(t, l, "node1", heal.HoldLeaseAcquired) // only node4's agent is held
	release(t, l, "node2", heal.HoldLeaseAcquired)
	before := idsByPeer(mustMembers(t, l))
	p3 := peerOf(t, l, "node3")
	ensureNotLeader(t, l, "node3")
	h := startHeal(t, l)
	h.fault()
	if err := h.chk.HardFault(func() error { return l.LoseNode("node3", true) }); err != nil {
		t.Fatal(err)
	}
	// The API server's etcd client fails what it had in flight on node3
	// when node3 dies; AddNode's Node create must not be one of those.
	waitWrites(t, h.chk, 3)
	n4, err := l.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.MoveMember("node3", n4.Name); err != nil {
		t.Fatal(err)
	}
	waitHold(t, l, "node4", heal.HoldLeaseAcquired)
	gateLog := filepath.Join(n4.LogsDir, "etcd-node4_etcd.log")
	eventually(t, 60*time.Second, "node4's start gate holds etcd back", func() error {
		if _, err := os.Stat(gateLog); err != nil {
			return err // its container has not started yet
		}
		if len(logEntries(t, gateLog, "start gate holds etcd back")) == 0 {
			return fmt.Errorf("no hold logged yet")
		}
		return nil
	})
	release(t, l, "node4", heal.HoldLeaseAcquired)
	j := h.waitHealed("node4", "node3", 3, 120*time.Second)

	// The member keeps its peer URL under a new ID, now served from node4.
	after := idsByPeer(mustMembers(t, l))
	if after[p3] == 0 || after[p3] == before[p3] || uint64(j.NewMemberID) != after[p3] || uint64(j.OldMemberID) != before[p3] {
		t.Fatalf("member node3: before %x, after %x; journal old %x new %x", before[p3], after[p3], uint64(j.OldMemberID), uint64(j.NewMemberID))
	}
	st := l.Status(ctx)
	onNode := map[string]bool{}
	for _, m := range st.Members {
		onNode[m.Node] = true
	}
	if !onNode["node1"] || !onNode["node2"] || !onNode["node4"] || onNode["node3"] || len(st.Members) != 3 {
		t.Fatalf("want members served by node1, node2, node4: %s (nodes %v)", st.Summary(), onNode)
	}
	if pids := processesOf(l, "node3"); len(pids) > 0 {
		t.Fatalf("processes of the lost node3 still running: %v", pids)
	}

	// etcd first started on node4 after the agent prepared its data dir.
	prepared, ok := j.PhaseTimes["prepared"]
	if !ok {
		t.Fatalf("journal has no prepared phase: %v", j.PhaseTimes)
	}
	// etcd's own first line, not the container's start: the container
	// starts with the gate, which execs etcd only once it may run.
	starts := etcdStarts(t, l, "node4", time.Time{}, time.Now())
	if len(starts) == 0 {
		t.Fatal("etcd never started on node4")
	}
	firstEtcd := starts[0]
	t.Logf("node4: data dir prepared %s, etcd first started %s", prepared.Format(time.RFC3339Nano), firstEtcd.Format(time.RFC3339Nano))
	if !firstEtcd.After(prepared) {
		t.Fatalf("etcd started on node4 at %s, before the agent prepared its data dir at %s", firstEtcd, prepared)
	}
	holds := logEntries(t, gateLog, "start gate holds etcd back")
	if held := entryTime(t, holds[0]); !held.Before(prepared) {
		t.Fatalf("node4's start gate first held etcd back at %s, not before the data dir was prepared at %s", held, prepared)
	}
	t.Logf("gate: %v", holds[0]["reason"])
	assertQuarantine(t, l, "node4", j)
	h.finish(invariantDefaults())
}

// processesOf lists the live lab processes started for node (its supervisor,
// its containers).
func processesOf(l *lab.Lab, node string) []int {
	n, err := l.Spec.Node(node)
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range l.LiveProcesses() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), n.NodeDir+"/") {
			out = append(out, pid)
		}
	}
	if procAliveish(n.SupervisorPID, n.NodeDir) {
		out = append(out, n.SupervisorPID)
	}
	return out
}

// procAliveish: pid runs (not a zombie) with marker in its command line.
func procAliveish(pid int, marker string) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X' {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), marker)
}

// TestFiveMembersTwoWipedHealOneAtATime: two of five members lose their data
// dir at once. Both agents want to heal; the recovery Lease lets one at a
// time: never two learners, never fewer than four voters, and the second
// recovery begins only after the first one closed.
func TestFiveMembersTwoWipedHealOneAtATime(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 5, Agents: true})
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2", "node4")
	h := startHeal(t, l)
	h.fault()
	for _, n := range []string{"node2", "node4"} {
		if err := l.WipeDataDir(n); err != nil {
			t.Fatal(err)
		}
	}
	j2 := h.waitHealed("node2", "node2", 5, 150*time.Second)
	j4 := h.waitHealed("node4", "node4", 5, 150*time.Second)
	after := idsByPeer(mustMembers(t, l))
	for _, n := range []string{"node2", "node4"} {
		if p := peerOf(t, l, n); after[p] == before[p] {
			t.Fatalf("%s's member kept ID %x", n, after[p])
		}
	}
	first, second := j2, j4
	if j4.StartedAt.Before(j2.StartedAt) {
		first, second = j4, j2
	}
	t.Logf("first %s %s → %s, second %s %s → %s", first.Member, first.StartedAt.Format("15:04:05.000"), first.FinishedAt.Format("15:04:05.000"),
		second.Member, second.StartedAt.Format("15:04:05.000"), second.FinishedAt.Format("15:04:05.000"))
	if !second.StartedAt.After(first.FinishedAt) {
		t.Fatalf("recoveries overlap: %s ran %s-%s, %s began %s", first.Member, first.StartedAt, first.FinishedAt, second.Member, second.StartedAt)
	}
	// While the first held the Lease, the second agent said why it waited.
	if v, err := refusals(l, second.Member, "lease-held-by-other"); err != nil || v < 1 {
		t.Fatalf("%s's agent counted %v lease-held-by-other refusals (%v), want some while %s healed", second.Member, v, err, first.Member)
	}
	rep := h.finish(invariant.Options{})
	if rep.MaxLearners != 1 {
		t.Fatalf("max learners %d, want exactly 1 (one rejoin at a time)", rep.MaxLearners)
	}
	firstVoter, secondSeen := -1, -1
	for i, m := range rep.Memberships {
		if voters := strings.Count(m, "/voter"); voters < 4 {
			t.Fatalf("a membership with %d voters: both members were out at once: %s", voters, m)
		}
		if firstVoter < 0 && strings.Contains(m, fmt.Sprintf("/%x/voter", uint64(first.NewMemberID))) {
			firstVoter = i
		}
		if secondSeen < 0 && strings.Contains(m, fmt.Sprintf("/%x/", uint64(second.NewMemberID))) {
			secondSeen = i
		}
	}
	// The sequence: the first member's learner is promoted before the
	// second member's learner is even added.
	if firstVoter < 0 || secondSeen < 0 || firstVoter >= secondSeen {
		t.Fatalf("memberships do not show %s promoted (%x, at %d) before %s's learner (%x, at %d) was added",
			first.Member, uint64(first.NewMemberID), firstVoter, second.Member, uint64(second.NewMemberID), secondSeen)
	}
	for _, n := range []string{"node2", "node4"} {
		j, _ := loadJournal(t, l, n, n)
		assertQuarantine(t, l, n, j)
	}
}
