package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// healRun is one heal scenario's measuring kit: the invariant checker runs
// from before the fault until finish.
type healRun struct {
	t       *testing.T
	l       *lab.Lab
	kc      kubernetes.Interface // nil for a lab without API server
	cli     *clientv3.Client
	chk     *invariant.Checker
	faultAt time.Time
	// steered are the leadership moves the test made while the checker
	// ran (steerOff): excused as an agent's hand-off is.
	steered []invariant.LeaderHandOff
}

// steerOff moves the leadership off nodes while the checker runs
// (ensureNotLeader) and records the move: etcd drops the proposals in
// flight when its leader changes, as at an agent's hand-off.
func (h *healRun) steerOff(nodes ...string) {
	h.t.Helper()
	from := time.Now()
	ensureNotLeader(h.t, h.l, nodes...)
	st, err := h.cli.MemberList(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	h.steered = append(h.steered, invariant.LeaderHandOff{ClusterID: st.Header.ClusterId, From: from, To: time.Now()})
}

// startHeal connects to the lab and starts the invariant checker (writer,
// quorum prober, membership watch), then waits for a few acknowledged writes
// so that the baseline is in the log before the fault.
func startHeal(t *testing.T, l *lab.Lab) *healRun {
	t.Helper()
	return startHealVia(t, l, l.Spec.ClientURLs()...)
}

// startHealVia is startHeal with the checker's etcd client (writer, quorum
// prober, membership watch) on endpoints only: a scenario that hangs a
// member (SIGSTOP) keeps the checker off it, so that the prober measures
// whether the cluster serves linearizable reads, not how fast a client
// fails over from a member that accepts connections and never answers.
func startHealVia(t *testing.T, l *lab.Lab, endpoints ...string) *healRun {
	t.Helper()
	h := &healRun{t: t, l: l}
	var err error
	if l.Spec.APIServer != nil {
		if h.kc, err = l.KubeClient(); err != nil {
			t.Fatal(err)
		}
	}
	if h.cli, err = l.EtcdClientFor(endpoints...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cli.Close() })
	if h.chk, err = invariant.Start(context.Background(), h.kc, h.cli); err != nil {
		t.Fatal(err)
	}
	if h.kc != nil {
		waitWrites(t, h.chk, 5)
	}
	return h
}

// wipeNode2 is the fault most heal scenarios start from: node2 (moved off
// the leadership first) has its data dir wiped while its etcd runs, under an
// invariant checker started just before; the TTR starts at the wipe.
func wipeNode2(t *testing.T, l *lab.Lab) *healRun {
	t.Helper()
	ensureNotLeader(t, l, "node2")
	h := startHeal(t, l)
	h.fault()
	if err := l.WipeDataDir("node2"); err != nil {
		t.Fatal(err)
	}
	return h
}

// fault records the moment of the fault (the start of the TTR).
func (h *healRun) fault() { h.faultAt = time.Now() }

// finish stops the checker and enforces the invariants; it logs the figures.
func (h *healRun) finish(o invariant.Options) invariant.Report {
	h.t.Helper()
	o.LeaderHandOffs = append(append(o.LeaderHandOffs, leaderHandOffs(h.t, h.l)...), h.steered...)
	o.PurgeCrashes = append(o.PurgeCrashes, purgeCrashes(h.t, h.l)...)
	rep, err := h.chk.Finish(context.Background(), o)
	h.t.Logf("invariants: %s", rep)
	h.t.Logf("figures: api writes attempted %d failed %d, p50 %s p99 %s; etcd writes attempted %d failed %d; longest read outage %s",
		rep.Writes.APIAttempted, rep.Writes.APIFailed, rep.APIp50.Round(time.Millisecond), rep.APIp99.Round(time.Millisecond),
		rep.Writes.EtcdAttempted, rep.Writes.EtcdFailed, rep.QuorumLostFor.Round(time.Millisecond))
	h.t.Logf("memberships seen:\n  %s", strings.Join(rep.Memberships, "\n  "))
	if err != nil {
		h.t.Fatalf("invariants broken: %v", err)
	}
	return rep
}

// member is one entry of the member list.
type member struct {
	Name    string
	ID      uint64
	Learner bool
	Peer    string
	Clients []string // its advertised client URLs
}

// memberList reads the member list through a fresh client for the lab's
// current client URLs (they change after MoveMember).
func memberList(ctx context.Context, l *lab.Lab) ([]member, error) {
	cli, err := l.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := cli.MemberList(rctx)
	if err != nil {
		return nil, err
	}
	var out []member
	for _, m := range resp.Members {
		mm := member{Name: m.Name, ID: m.ID, Learner: m.IsLearner, Clients: m.ClientURLs}
		if len(m.PeerURLs) > 0 {
			mm.Peer = m.PeerURLs[0]
		}
		out = append(out, mm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out, nil
}

func mustMembers(t *testing.T, l *lab.Lab) []member {
	t.Helper()
	var ms []member
	eventually(t, 15*time.Second, "member list", func() (err error) {
		ms, err = memberList(context.Background(), l)
		return err
	})
	return ms
}

// idsByPeer maps peer URL to member ID: a member is identified by its peer
// URL (a rejoined member keeps it and gets a new ID; an unstarted learner has
// no name yet).
func idsByPeer(ms []member) map[string]uint64 {
	out := map[string]uint64{}
	for _, m := range ms {
		out[m.Peer] = m.ID
	}
	return out
}

// peerOf is the peer URL of node's member.
func peerOf(t *testing.T, l *lab.Lab, node string) string {
	t.Helper()
	n, err := l.Spec.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	return n.PeerURL
}

func nodeOf(t *testing.T, l *lab.Lab, node string) *lab.Node {
	t.Helper()
	n, err := l.Spec.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// loadJournal reads member's journal in node's agent state dir.
func loadJournal(t *testing.T, l *lab.Lab, node, memberName string) (journal.Record, bool) {
	t.Helper()
	j, ok, err := journal.Load(nodeOf(t, l, node).StateDir, memberName)
	if err != nil {
		t.Fatal(err)
	}
	return j, ok
}

// waitHealed waits until node's agent closed the journal of member with
// result succeeded and the cluster has want healthy voters (no learner);
// it returns the journal and logs the TTR measured from the fault.
func (h *healRun) waitHealed(node, memberName string, want int, d time.Duration) journal.Record {
	h.t.Helper()
	var j journal.Record
	eventually(h.t, d, fmt.Sprintf("%s's agent closes the recovery of %s", node, memberName), func() error {
		var ok bool
		j, ok = loadJournal(h.t, h.l, node, memberName)
		switch {
		case !ok:
			return fmt.Errorf("no journal yet")
		case j.Active():
			return fmt.Errorf("recovery open in phase %s", j.Phase)
		case j.Result != journal.ResultSucceeded:
			return fmt.Errorf("recovery closed with %s (%s: %s); failures %d", j.Result, j.Reason, j.Message, j.Failures)
		case !h.faultAt.IsZero() && j.FinishedAt.Before(h.faultAt):
			return fmt.Errorf("only an older recovery is closed")
		}
		return nil
	})
	if err := h.l.WaitHealthy(context.Background(), want, 60*time.Second); err != nil {
		h.t.Fatal(err)
	}
	if !h.faultAt.IsZero() {
		h.t.Logf("TTR %s: fault %s → recovery of %s succeeded %s (recovery itself took %s, started %s after the fault; healthy seen after %s)",
			j.FinishedAt.Sub(h.faultAt).Round(time.Millisecond), h.faultAt.Format("15:04:05.000"), memberName,
			j.FinishedAt.Local().Format("15:04:05.000"), j.FinishedAt.Sub(j.StartedAt).Round(time.Millisecond),
			j.StartedAt.Sub(h.faultAt).Round(time.Millisecond), time.Since(h.faultAt).Round(time.Millisecond))
	}
	logPhases(h.t, j)
	return j
}

func logPhases(t *testing.T, j journal.Record) {
	type pt struct {
		p  journal.Phase
		at time.Time
	}
	var ps []pt
	for p, at := range j.PhaseTimes {
		ps = append(ps, pt{p, at})
	}
	sort.Slice(ps, func(i, k int) bool { return ps[i].at.Before(ps[k].at) })
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s +%s", p.p, p.at.Sub(j.StartedAt).Round(time.Millisecond)))
	}
	t.Logf("journal %s: old %x new %x; phases: %s", j.ID, uint64(j.OldMemberID), uint64(j.NewMemberID), strings.Join(parts, ", "))
}

// assertQuarantine checks rule 8 (nothing deleted): the quarantine folder on
// node's disk holds the pre-change snapshot the journal names and, when the
// journal quarantined a data dir, that data dir; wantFiles are paths that
// must exist inside the quarantined data dir (the old member's files).
func assertQuarantine(t *testing.T, l *lab.Lab, node string, j journal.Record, wantFiles ...string) {
	t.Helper()
	qdir := filepath.Join(nodeOf(t, l, node).DiskDir, "etcd-agent-quarantine")
	entries, err := os.ReadDir(qdir)
	if err != nil {
		t.Fatalf("quarantine folder: %v", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	t.Logf("quarantine %s: %v", qdir, names)
	if j.SnapshotPath == "" || filepath.Dir(j.SnapshotPath) != qdir {
		t.Fatalf("journal names snapshot %q, want one in %s", j.SnapshotPath, qdir)
	}
	if st, err := os.Stat(j.SnapshotPath); err != nil || st.Size() != j.SnapshotBytes || st.Size() == 0 {
		t.Fatalf("pre-change snapshot %s: %v (size %v, journal says %d)", j.SnapshotPath, err, st, j.SnapshotBytes)
	}
	if len(wantFiles) == 0 {
		return
	}
	if j.QuarantinePath == "" || filepath.Dir(j.QuarantinePath) != qdir {
		t.Fatalf("journal names quarantined data dir %q, want one in %s", j.QuarantinePath, qdir)
	}
	for _, f := range wantFiles {
		matches, _ := filepath.Glob(filepath.Join(j.QuarantinePath, f))
		if len(matches) == 0 {
			t.Fatalf("quarantined data dir %s lacks %s (the old member's files must be kept)", j.QuarantinePath, f)
		}
	}
}

// agentLog is the path of node's agent container log.
func agentLog(t *testing.T, l *lab.Lab, node string) string {
	return filepath.Join(nodeOf(t, l, node).LogsDir, "etcd-agent-"+node+"_etcd-agent.log")
}

// leaderHandOffs are the leadership hand-offs every agent of the lab logged
// (before stopping a member that led), for Finish to excuse the writes
// etcd dropped meanwhile.
func leaderHandOffs(t *testing.T, l *lab.Lab) []invariant.LeaderHandOff {
	t.Helper()
	var out []invariant.LeaderHandOff
	for _, n := range l.Spec.Nodes {
		path := agentLog(t, l, n.Name)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		for _, e := range logEntries(t, path, "leadership handed off before stopping the member") {
			to := entryTime(t, e)
			secs, ok := e["took"].(float64) // zap's production encoder: seconds
			if !ok {
				t.Fatalf("hand-off log entry without a took: %v", e)
			}
			took := time.Duration(secs * float64(time.Second))
			id, err := strconv.ParseUint(fmt.Sprint(e["cluster"]), 16, 64)
			if err != nil {
				t.Fatalf("hand-off log entry without a cluster: %v", e)
			}
			out = append(out, invariant.LeaderHandOff{ClusterID: id, From: to.Add(-took), To: to})
		}
	}
	return out
}

// stopWatchSays returns the gate's stop watch log lines in node's etcd log
// whose msg contains msg (the watch logs to etcd's stderr).
func stopWatchSays(t *testing.T, l *lab.Lab, node, msg string) []map[string]any {
	t.Helper()
	return logEntries(t, filepath.Join(nodeOf(t, l, node).LogsDir, "etcd-"+node+"_etcd.log"), "stop watch: "+msg)
}

// waitStopWatchConnected waits until the stop watch beside node's running
// etcd is connected to it (more "connected" lines than etcds it ended).
func waitStopWatchConnected(t *testing.T, l *lab.Lab, node string) {
	t.Helper()
	eventually(t, 30*time.Second, node+"'s stop watch connected to its etcd", func() error {
		if c, e := len(stopWatchSays(t, l, node, "connected to etcd")), len(stopWatchSays(t, l, node, "etcd ended without")); c <= e {
			return fmt.Errorf("%d connected, %d ended", c, e)
		}
		return nil
	})
}

// logEntries returns the JSON log lines of path whose msg contains msg.
func logEntries(t *testing.T, path, msg string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			continue
		}
		if m, _ := e["msg"].(string); strings.Contains(m, msg) {
			out = append(out, e)
		}
	}
	return out
}

func entryTime(t *testing.T, e map[string]any) time.Time {
	t.Helper()
	s, _ := e["ts"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("log entry without an RFC 3339 ts: %v", e)
	}
	return at
}

// metricValue scrapes node's agent for one series.
func metricValue(l *lab.Lab, node, name string, labels map[string]string) (float64, error) {
	m, err := l.AgentMetrics(context.Background(), node)
	if err != nil {
		return 0, err
	}
	v, ok := m.Value(name, labels)
	if !ok {
		return 0, fmt.Errorf("%s%v not exported", name, labels)
	}
	return v, nil
}

// refusals is node's etcd_agent_recovery_refusals_total{reason}.
func refusals(l *lab.Lab, node, reason string) (float64, error) {
	return metricValue(l, node, "etcd_agent_recovery_refusals_total", map[string]string{"reason": reason})
}

// refusedFor is how long node's agent has been refused with reason without
// a break (etcd_agent_recovery_refused_since_timestamp_seconds); an error
// while it is not refused with it. Refusals count once per change of
// reason, so "refused for a while" is this gauge, not the counter.
func refusedFor(l *lab.Lab, node, reason string) (time.Duration, error) {
	v, err := metricValue(l, node, "etcd_agent_recovery_refused_since_timestamp_seconds", map[string]string{"reason": reason})
	if err != nil {
		return 0, err
	}
	if v <= 0 {
		return 0, fmt.Errorf("node %s not refused with %s now", node, reason)
	}
	return time.Since(time.Unix(int64(v), 0)), nil
}

// annotate sets (or, with a nil value, removes) annotations on node's Node.
func annotate(t *testing.T, kc kubernetes.Interface, node string, ann map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	// Retried: the API can be briefly unavailable while a member is wiped,
	// as it is for an SRE, who would try again.
	eventually(t, 30*time.Second, "annotate node "+node, func() error {
		_, err := kc.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// waitLastRecovery waits until node's last-recovery annotation changes from
// prev (its raw value) and the trigger annotations are gone; it returns it.
func waitLastRecovery(t *testing.T, kc kubernetes.Interface, node, prev string, d time.Duration) (nodereport.LastRecovery, string) {
	t.Helper()
	var lr nodereport.LastRecovery
	var raw string
	eventually(t, d, node+" last-recovery written and trigger cleared", func() error {
		n, err := kc.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		raw = n.Annotations[nodereport.AnnotationLastRecovery]
		if raw == "" || raw == prev {
			return fmt.Errorf("no new last-recovery (have %q)", raw)
		}
		lr, _, err = nodereport.LastRecoveryFrom(n.Annotations)
		if err != nil {
			return err
		}
		if v, ok := n.Annotations[nodereport.AnnotationRecover]; ok {
			return fmt.Errorf("last-recovery %s but trigger %s=%s still set", raw, nodereport.AnnotationRecover, v)
		}
		if v, ok := n.Annotations[nodereport.AnnotationRecoverDryRun]; ok {
			return fmt.Errorf("last-recovery %s but %s=%s still set", raw, nodereport.AnnotationRecoverDryRun, v)
		}
		return nil
	})
	return lr, raw
}

// ensureNotLeader moves leadership away from the members of nodes, so that
// a fault on them or their heal stops a follower. Stopping the leader (by a
// fault, or a heal even after its leadership hand-off) means a leader
// transfer, during which etcd drops the proposals followers forward: an API
// write in that ~100 ms window fails after etcd's 7 s request timeout. That
// is etcd's own disruption, not what these scenarios measure.
func ensureNotLeader(t *testing.T, l *lab.Lab, nodes ...string) {
	t.Helper()
	avoid := map[string]bool{}
	for _, n := range nodes {
		avoid[n] = true
	}
	eventually(t, 20*time.Second, fmt.Sprintf("leader is none of %v", nodes), func() error {
		st := l.Status(context.Background())
		var leader, other lab.MemberStatus
		for _, m := range st.Members {
			switch {
			case m.Leader:
				leader = m
			case !avoid[m.Node] && m.Healthy && !m.Learner:
				other = m
			}
		}
		if leader.ID == "" {
			return fmt.Errorf("no leader: %s", st.Summary())
		}
		if !avoid[leader.Node] {
			return nil
		}
		if other.ID == "" {
			return fmt.Errorf("no healthy follower to move leadership to: %s", st.Summary())
		}
		var to uint64
		fmt.Sscanf(other.ID, "%x", &to)
		cli, err := l.EtcdClientFor(leader.ClientURL)
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.MoveLeader(ctx, to); err != nil {
			return err
		}
		return fmt.Errorf("leadership moved from %s to %s; checking again", leader.Name, other.Name)
	})
}

// invariantDefaults: every invariant enforced (no failed write, quorum kept).
func invariantDefaults() invariant.Options { return invariant.Options{} }

// metricSum adds up every series of name on node's agent (all label values).
func metricSum(l *lab.Lab, node, name string) (float64, error) {
	m, err := l.AgentMetrics(context.Background(), node)
	if err != nil {
		return 0, err
	}
	fam, ok := m[name]
	if !ok {
		return 0, nil // a vector with no series yet
	}
	var sum float64
	for _, s := range fam.Metric {
		switch {
		case s.Counter != nil:
			sum += s.Counter.GetValue()
		case s.Gauge != nil:
			sum += s.Gauge.GetValue()
		}
	}
	return sum, nil
}

// serializableIDs is the member list as node's own etcd knows it (a
// serializable read: it answers without a quorum).
func serializableIDs(t *testing.T, l *lab.Lab, node string) map[string]uint64 {
	t.Helper()
	cli, err := l.EtcdClientFor(nodeOf(t, l, node).ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var out map[string]uint64
	eventually(t, 10*time.Second, node+" serializable member list", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := cli.MemberList(ctx, clientv3.WithSerializable())
		if err != nil {
			return err
		}
		out = map[string]uint64{}
		for _, m := range resp.Members {
			if len(m.PeerURLs) > 0 {
				out[m.PeerURLs[0]] = m.ID
			}
		}
		return nil
	})
	return out
}

// assertNoRecovery: node's agent never opened a recovery of memberName.
func assertNoRecovery(t *testing.T, l *lab.Lab, node, memberName string) {
	t.Helper()
	if j, ok := loadJournal(t, l, node, memberName); ok {
		t.Fatalf("%s's agent wrote a journal for %s: phase %s result %s (%s)", node, memberName, j.Phase, j.Result, j.Reason)
	}
	if v, err := metricSum(l, node, "etcd_agent_recoveries_total"); err != nil || v != 0 {
		t.Fatalf("%s's agent: recoveries_total %v (%v), want 0", node, v, err)
	}
}

func sameIDs(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// wantRemovalThenAddAsChangesItHad: a learner seeded from a db older than
// the old member's removal and its own add (a pod move's stored snapshot, a
// restored data dir) met both in the leader's log as changes it had: etcd's
// validation rejected them, in that order, and applied them as no-ops.
func wantRemovalThenAddAsChangesItHad(t *testing.T, etcdLog string) {
	t.Helper()
	var rejected []string
	for _, e := range logEntries(t, etcdLog, "Validation on configuration change failed") {
		rejected = append(rejected, fmt.Sprint(e["error"]))
	}
	if len(rejected) != 2 || !strings.Contains(rejected[0], "membership: ID removed") && !strings.Contains(rejected[0], "membership: ID not found") || rejected[1] != "membership: ID exists" {
		t.Fatalf("the learner's etcd rejected %v, want the removal then the add (changes it had)", rejected)
	}
}

// sameMember: a and b are the same entry of a member list.
func sameMember(a, b member) bool {
	return a.Name == b.Name && a.ID == b.ID && a.Learner == b.Learner && a.Peer == b.Peer && slices.Equal(a.Clients, b.Clients)
}
