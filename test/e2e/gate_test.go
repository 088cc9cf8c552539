package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// idWatch records which member ID answers Status at one client URL, polled
// every 20 ms, so a test can prove that a member ID never came back.
type idWatch struct {
	mu      sync.Mutex
	answers []idAnswer
	stop    context.CancelFunc
	done    chan struct{}
}

type idAnswer struct {
	at time.Time // when the request was sent
	id uint64
}

func watchMemberID(t *testing.T, l *lab.Lab, node string) *idWatch {
	t.Helper()
	return watchMemberIDAt(t, l, nodeOf(t, l, node).ClientURL)
}

// watchMemberIDAt is watchMemberID for the member at client URL ep.
func watchMemberIDAt(t *testing.T, l *lab.Lab, ep string) *idWatch {
	t.Helper()
	u, err := url.Parse(ep)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &idWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			// A fresh client per answer: gRPC's reconnect backoff would hide
			// a member that comes up for a moment.
			if c, err := net.DialTimeout("tcp", u.Host, 100*time.Millisecond); err == nil {
				c.Close()
				if cli, err := l.EtcdClientFor(ep); err == nil {
					w.probe(ctx, func(ctx context.Context) (uint64, error) {
						st, err := cli.Status(ctx, ep)
						if err != nil {
							return 0, err
						}
						return st.Header.MemberId, nil
					})
					cli.Close()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.close)
	return w
}

// probe asks status for the member ID once and records the answer at the
// time the request was sent: an answer read after a kill may have been
// written before it, so only a request sent after a time proves the member
// served after it.
func (w *idWatch) probe(ctx context.Context, status func(context.Context) (uint64, error)) {
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	sent := time.Now()
	id, err := status(rctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	w.answers = append(w.answers, idAnswer{sent, id})
	w.mu.Unlock()
}

func (w *idWatch) close() {
	w.stop()
	<-w.done
}

// since lists the IDs that answered at or after from.
func (w *idWatch) since(from time.Time) []idAnswer {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []idAnswer
	for _, a := range w.answers {
		if !a.at.Before(from) {
			out = append(out, a)
		}
	}
	return out
}

// etcdStarts lists the times etcd started in node's etcd container in
// [from, until) ("starting an etcd server" is etcd's first line).
func etcdStarts(t *testing.T, l *lab.Lab, node string, from, until time.Time) []time.Time {
	t.Helper()
	return etcdStartsIn(t, filepath.Join(nodeOf(t, l, node).LogsDir, "etcd-"+node+"_etcd.log"), from, until)
}

// etcdStartsIn is etcdStarts for the etcd container log at path.
func etcdStartsIn(t *testing.T, path string, from, until time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	for _, e := range logEntries(t, path, "starting an etcd server") {
		if at, ok := etcdLogTime(e); ok && !at.Before(from) && at.Before(until) {
			out = append(out, at)
		}
	}
	return out
}

// holdAgent SIGSTOPs node's agent, so that only the start gate stands
// between etcd and its data dir (an agent that is slow, restarting or gone);
// the returned func resumes it.
func holdAgent(t *testing.T, l *lab.Lab, node string) func() {
	t.Helper()
	pid, err := l.AgentPID(node)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume := func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// assertNotStarted fails if etcd started in node's etcd container in
// [from, until), or if id answered at its client URL in that time: the data
// dir was lost at from, and until is when the agent prepared a data dir for
// a new member ID (or now).
func assertNotStarted(t *testing.T, l *lab.Lab, w *idWatch, node string, id uint64, from, until time.Time) {
	t.Helper()
	for _, a := range w.since(from) {
		if a.at.Before(until) {
			t.Fatalf("%s served (member %x, old ID %x) at %s, %s after its data dir was lost, before the agent prepared a new one", node, a.id, id,
				a.at.Format("15:04:05.000"), a.at.Sub(from).Round(time.Millisecond))
		}
	}
	if s := etcdStarts(t, l, node, from, until); len(s) > 0 {
		t.Fatalf("etcd on %s started on its lost data dir under its old member ID %x, %s after the fault (%d starts before the agent prepared a new data dir)",
			node, id, s[0].Sub(from).Round(time.Millisecond), len(s))
	}
}

// preparedAt is when the recovery j prepared the data dir for its learner.
func preparedAt(t *testing.T, j journal.Record) time.Time {
	t.Helper()
	at, ok := j.PhaseTimes[journal.PhasePrepared]
	if !ok {
		t.Fatalf("journal %s has no prepared phase", j.ID)
	}
	return at
}

// TestWipedMemberKilledInsideGraceNeverRestartsUnderItsOldID (issue 9 item
// 2): node2's data dir is wiped while its etcd runs, then etcd is SIGKILLed
// inside the grace period with the agent held (SIGSTOP), so only the start
// gate stands between the supervisor's restart and the empty data dir.
// Before the gate wrapped etcd, the restart (no init container reruns on a
// container restart) ran etcd under its old ID on an empty WAL. Now the
// restarted container waits in the gate; once the agent is back it heals.
func TestWipedMemberKilledInsideGraceNeverRestartsUnderItsOldID(t *testing.T) {
	wipedMemberKilledInsideGrace(t, etcd36)
}

// wipedMemberKilledInsideGrace is that scenario on etcd e.
func wipedMemberKilledInsideGrace(t *testing.T, e etcdUnderTest) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdBinary: e.binary})
	requireVersion(t, l, e.version)
	ensureNotLeader(t, l, "node2")
	old := idsByPeer(mustMembers(t, l))[peerOf(t, l, "node2")]
	w := watchMemberID(t, l, "node2")
	h := startHeal(t, l)
	resume := holdAgent(t, l, "node2")
	h.fault()
	if err := l.WipeDataDir("node2"); err != nil {
		t.Fatal(err)
	}
	var killed int
	if err := h.chk.HardFault(func() (err error) { killed, err = l.KillMember("node2"); return err }); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now() // from here on nothing may serve or start as node2 until the agent prepared a new data dir
	t.Logf("node2: data dir wiped, etcd pid %d killed %s after the wipe, agent held", killed, time.Since(h.faultAt).Round(time.Millisecond))
	eventually(t, 30*time.Second, "the supervisor restarts node2's etcd container", func() error {
		pid, err := l.EtcdPID("node2")
		if err != nil {
			return err
		}
		if pid == killed {
			return fmt.Errorf("still the killed pid %d", pid)
		}
		return nil
	})
	// The restarted container must wait: give it well over its restart
	// backoff and an etcd start's worth of time to show itself.
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		assertNotStarted(t, l, w, "node2", old, killedAt, time.Now())
		time.Sleep(200 * time.Millisecond)
	}
	gateLog := strings.Join(logMessages(t, filepath.Join(nodeOf(t, l, "node2").LogsDir, "etcd-node2_etcd.log"), "start gate holds etcd back"), "; ")
	if gateLog == "" {
		t.Fatal("node2's etcd container did not log the start gate holding it back")
	}
	t.Logf("while the agent was held: the gate held etcd back; node2 answered %d times since the kill", len(w.since(killedAt)))
	resume()
	j := h.waitHealed("node2", "node2", 3, 120*time.Second)
	if uint64(j.OldMemberID) != old || j.NewMemberID == 0 || uint64(j.NewMemberID) == old {
		t.Fatalf("journal: old %x new %x, want old %x and a new ID", uint64(j.OldMemberID), uint64(j.NewMemberID), old)
	}
	w.close()
	assertNotStarted(t, l, w, "node2", old, killedAt, preparedAt(t, j))
	newAnswers := 0
	for _, a := range w.since(h.faultAt) {
		if a.id == uint64(j.NewMemberID) {
			newAnswers++
		}
	}
	if newAnswers == 0 {
		t.Fatalf("node2 never answered under its new ID %x", uint64(j.NewMemberID))
	}
	t.Logf("node2: old ID %x never answered after the fault; new ID %x answered %d times", old, uint64(j.NewMemberID), newAnswers)
	h.finish(invariantDefaults())
}

// logMessages returns the "msg" of every JSON log line of path that contains sub.
func logMessages(t *testing.T, path, sub string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return out
}

// powerEvent stops every member, as a power cut would.
func powerEvent(t *testing.T, l *lab.Lab) {
	t.Helper()
	stopAll(t, l, "node1", "node2", "node3")
}

// TestKubeadmFirstNodeLosingItsDataInAPowerEventIsHeldThenHealed (issue 9
// item 1): node1's manifest is what kubeadm writes on the first
// control-plane node (--initial-cluster lists only itself, no
// --initial-cluster-state). A power event stops every member; node1 comes
// back first with its data dir gone. The rest of the cluster is
// unreachable, which used to make the gate pass "bootstrapping": etcd then
// made a fresh one-member cluster under node1's member and cluster IDs (an
// empty API, a split brain once the others return). Now node1 is held
// until the others are back, and then healed as a new member.
func TestKubeadmFirstNodeLosingItsDataInAPowerEventIsHeldThenHealed(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true})
	ctx := context.Background()
	old := idsByPeer(mustMembers(t, l))[peerOf(t, l, "node1")]
	n1 := nodeOf(t, l, "node1")
	w := watchMemberID(t, l, "node1")
	h := startHeal(t, l)
	h.fault()
	powerEvent(t, l)
	down := time.Now() // every member is stopped: from here on node1 may not serve until the agent prepared it
	if err := l.KubeadmFirstNodeManifest("node1"); err != nil {
		t.Fatal(err)
	}
	if err := l.WipeDataDir("node1"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartMember("node1"); err != nil {
		t.Fatal(err)
	}
	t.Logf("power event: all members stopped; node1 (kubeadm first-node manifest) started alone on a wiped data dir %s", n1.DataDir)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		assertNotStarted(t, l, w, "node1", old, down, time.Now())
		time.Sleep(200 * time.Millisecond)
	}
	if len(logMessages(t, filepath.Join(n1.LogsDir, "etcd-node1_etcd.log"), "start gate holds etcd back")) == 0 {
		t.Fatal("node1's etcd container did not log the start gate holding it back")
	}
	t.Logf("node1 held for %s with the cluster unreachable", time.Since(h.faultAt).Round(time.Millisecond))
	startAll(t, l, "node2", "node3")
	j := h.waitHealed("node1", "node1", 3, 180*time.Second)
	if uint64(j.OldMemberID) != old || j.NewMemberID == 0 || uint64(j.NewMemberID) == old {
		t.Fatalf("journal: old %x new %x, want old %x and a new ID", uint64(j.OldMemberID), uint64(j.NewMemberID), old)
	}
	w.close()
	assertNotStarted(t, l, w, "node1", old, down, preparedAt(t, j))
	if err := l.WaitHealthy(ctx, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	h.finish(invariant.Options{AllowQuorumLoss: true, AllowFailedWrites: true})
}

// TestSingleMemberWithDataDirLostIsHeldAndRefused (issue 9 item 1, the
// single-master case): the only member's data dir is lost and etcd
// restarts. Before, etcd came back on an empty data dir: an empty API. Now
// the gate holds it, and the agent refuses majority-lost, saying that a
// restore from backup is a human's call and where the snapshots are.
func TestSingleMemberWithDataDirLostIsHeldAndRefused(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 1, Agents: true})
	old := idsByPeer(mustMembers(t, l))[peerOf(t, l, "node1")]
	w := watchMemberID(t, l, "node1")
	if err := l.WipeDataDir("node1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.KillMember("node1"); err != nil {
		t.Fatal(err)
	}
	faultAt := time.Now() // killed: from here on nothing may serve as node1
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		assertNotStarted(t, l, w, "node1", old, faultAt, time.Now())
		time.Sleep(200 * time.Millisecond)
	}
	eventually(t, 60*time.Second, "node1's agent refuses majority-lost", func() error {
		v, err := refusals(l, "node1", "majority-lost")
		if err != nil {
			return err
		}
		if v < 1 {
			return fmt.Errorf("refusals_total{reason=majority-lost} = %v", v)
		}
		return nil
	})
	assertNotStarted(t, l, w, "node1", old, faultAt, time.Now())
	if len(logMessages(t, filepath.Join(nodeOf(t, l, "node1").LogsDir, "etcd-node1_etcd.log"), "start gate holds etcd back")) == 0 {
		t.Fatal("node1's etcd container did not log the start gate holding it back")
	}
	var refusal []string
	for _, line := range logMessages(t, agentLog(t, l, "node1"), `"msg":"recovery refused"`) {
		if strings.Contains(line, `"reason":"majority-lost"`) {
			refusal = append(refusal, line)
		}
	}
	if len(refusal) == 0 || !strings.Contains(refusal[len(refusal)-1], "restor") || !strings.Contains(refusal[len(refusal)-1], "quarantine") {
		t.Fatalf("the refusal does not say that a restore is a human's call and where the snapshots are: %q", refusal)
	}
	st := agentStatusJSON(t, l, "node1")
	if !strings.Contains(st, `"majorityLost": true`) || !strings.Contains(st, "restor") {
		t.Fatalf("status does not show the held single member: %s", st)
	}
	t.Logf("single member held for %s; refusal: %s", time.Since(faultAt).Round(time.Millisecond), refusal[len(refusal)-1])
}

// agentStatusJSON is node's agent's status file (what `status` shows).
func agentStatusJSON(t *testing.T, l *lab.Lab, node string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(nodeOf(t, l, node).StateDir, "status.json"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// etcdLogTime reads etcd's own "ts" (ISO 8601, as zap writes it for etcd).
func etcdLogTime(e map[string]any) (time.Time, bool) {
	s, _ := e["ts"].(string)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.000Z0700"} {
		if at, err := time.Parse(layout, s); err == nil {
			return at, true
		}
	}
	return time.Time{}, false
}
