package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMoveStaticPodMemberAddFirst (UC3): node2's healthy member moves to a
// new node4, add first. node4 is provisioned with a manifest for a new
// member; its agent does not add it on its own (not-a-member) until
// `etcd-agent move node2 --to node4` asks. Throughout, the healthy voters
// (polled every 100 ms) never drop below 3; at the end node1, node3 and
// node4 are the voters, node2's etcd is gone with its manifest set aside
// and its data dir quarantined, no API write failed, HashKV is equal, the
// leader sent no raft snapshot: the learner was seeded from the move's
// snapshot in the store, taken before its add (etcd 3.6, 3.5 and 3.7).
func TestMoveStaticPodMemberAddFirst(t *testing.T) {
	t.Run("file", func(t *testing.T) { testMoveStaticPodMemberAddFirst(t, lab.SnapshotStoreFile, etcd36) })
	t.Run("s3", func(t *testing.T) { testMoveStaticPodMemberAddFirst(t, lab.SnapshotStoreS3, etcd36) })
	t.Run("file-etcd3.5", func(t *testing.T) { testMoveStaticPodMemberAddFirst(t, lab.SnapshotStoreFile, etcd35()) })
	t.Run("file-etcd3.7", func(t *testing.T) { testMoveStaticPodMemberAddFirst(t, lab.SnapshotStoreFile, etcd37()) })
}

func testMoveStaticPodMemberAddFirst(t *testing.T, kind string, e etcdUnderTest) {
	ctx := context.Background()
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, SnapshotStore: kind, EtcdBinary: e.binary})
	requireVersion(t, l, e.version)
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	n4, err := l.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ensureNotLeader(t, l, "node2")
	sentBefore := snapshotsSent(t, l) // node4's etcd does not serve until the move
	if _, err := l.PlaceNewMember(n4.Name); err != nil {
		t.Fatal(err)
	}
	// Unasked, node4's agent leaves its never-seen member out.
	eventually(t, 60*time.Second, "node4's agent says its member was never a member", func() error {
		r, err := readAgentStatus(n4.StateDir)
		if err != nil {
			return err
		}
		if r.Decision == nil || r.Decision.Reason != plan.ReasonNotAMember {
			return fmt.Errorf("decision %+v", r.Decision)
		}
		return nil
	})
	if ms := mustMembers(t, l); len(ms) != 3 {
		t.Fatalf("node4's member was added unasked: %+v", ms)
	}

	// A dry run plans and changes nothing.
	lr, err := nodereport.RequestMove(ctx, kc, "node2", "node4", true, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Reason != string(plan.ReasonDryRun) || !strings.Contains(lr.Message, "would ask node4") {
		t.Fatalf("dry run answered %+v", lr)
	}
	if ms := mustMembers(t, l); len(ms) != 3 {
		t.Fatalf("the dry run changed the membership: %+v", ms)
	}

	h := startHeal(t, l)
	watch := watchHealthyVoters(t, l)
	h.fault()
	lr, err = nodereport.RequestMove(ctx, kc, "node2", "node4", false, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	minVoters, lows := watch.stop()
	t.Logf("move answered: %+v", lr)
	if lr.Result != nodereport.ResultSucceeded || lr.Request != plan.ActionMoveOut {
		t.Fatalf("move: %+v", lr)
	}
	t.Logf("healthy voters: at least %d throughout (%d polls); moments at the minimum: %v", minVoters, watch.polls, lows)
	if minVoters < 3 {
		t.Fatalf("healthy voters dropped to %d during the move: %v", minVoters, lows)
	}

	// The members: node1, node3, node4, all voters.
	names := map[string]bool{}
	for _, m := range mustMembers(t, l) {
		if m.Learner {
			t.Fatalf("learner left: %+v", m)
		}
		names[m.Name] = true
	}
	if len(names) != 3 || !names["node1"] || !names["node3"] || !names["node4"] {
		t.Fatalf("members after the move: %v", names)
	}
	// node2: manifest set aside for good, data dir quarantined, etcd gone.
	n2 := nodeOf(t, l, "node2")
	if _, err := os.Stat(n2.EtcdManifest()); !os.IsNotExist(err) {
		t.Fatalf("node2's manifest is still in the manifests dir (%v)", err)
	}
	moved, _ := filepath.Glob(filepath.Join(n2.StateDir, "moved", "etcd.yaml.*"))
	if len(moved) != 1 {
		t.Fatalf("node2's manifest is not set aside in moved/: %v", moved)
	}
	jOut, ok := loadJournal(t, l, "node2", "node2")
	if !ok || jOut.Request != plan.ActionMoveOut || jOut.Result != journal.ResultSucceeded || jOut.QuarantinePath == "" {
		t.Fatalf("node2's journal: %+v", jOut)
	}
	if _, err := os.Stat(filepath.Join(jOut.QuarantinePath, "member", "snap", "db")); err != nil {
		t.Fatalf("node2's data dir is not kept in the quarantine: %v", err)
	}
	if err := l.MemberMovedAway("node2"); err != nil {
		t.Fatal(err)
	}
	jIn, ok := loadJournal(t, l, "node4", "node4")
	if !ok || jIn.Request != plan.ActionMoveIn || jIn.Result != journal.ResultSucceeded || jIn.StoreKey == "" {
		t.Fatalf("node4's journal: %+v", jIn)
	}
	t.Logf("node4: rejoin mode %s (fallback %q), seeded at index %d; the move's snapshot in the store: %s", jIn.RejoinMode, jIn.SeedFallback, jIn.SeedIndex, jIn.StoreKey)
	if jIn.RejoinMode != "seed" || jIn.SeedSource != "store:"+jIn.StoreKey {
		t.Fatalf("node4's member was not seeded from the stored snapshot: mode %s (fallback %s), source %q", jIn.RejoinMode, jIn.SeedFallback, jIn.SeedSource)
	}
	// The snapshot predates the add: the seed wrote the learner in, and
	// etcd applied the add's entry as a change it had.
	if es := logEntries(t, agentLog(t, l, "node4"), "learner written into the snapshot's membership (the snapshot predates its add)"); len(es) == 0 {
		t.Fatal("node4's seed did not write its learner into the stored snapshot")
	}
	// Once applied (shouldApplyV3); a 3.5 member restarted on its own
	// client URLs after its promotion replays it from its WAL, again as a
	// change it has (shouldApplyV3 false).
	es := logEntries(t, filepath.Join(n4.LogsDir, "etcd-node4_etcd.log"), "Validation on configuration change failed")
	applied := 0
	for _, e := range es {
		if e["error"] != "membership: ID exists" {
			t.Fatalf("node4's etcd refused a configuration change: %v", e)
		}
		if e["shouldApplyV3"] == true {
			applied++
		}
	}
	if applied != 1 {
		t.Fatalf("node4's etcd did not apply its add once as a change it had: %v", es)
	}
	if sent := snapshotsSent(t, l) - sentBefore; sent != 0 {
		t.Fatalf("the leader sent %v raft snapshots during the move", sent)
	}
	if e.version == etcd35().version {
		assertV2StoreFromSeed(t, l, n4.Name, h.faultAt, jIn.SeedIndex, false)
	}
	rep := h.finish(invariantDefaults())
	if rep.Writes.APIAttempted == 0 {
		t.Fatal("no API writes were attempted during the move")
	}
}

func readAgentStatus(stateDir string) (agent.Report, error) {
	var r agent.Report
	b, err := os.ReadFile(filepath.Join(stateDir, agent.StatusFile))
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	return r, err
}

// voterWatch polls the member list and each voter's Status every 100 ms
// and keeps the fewest voters that answered.
type voterWatch struct {
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	min    int
	lows   []string
	polls  int
}

func watchHealthyVoters(t *testing.T, l *lab.Lab) *voterWatch {
	t.Helper()
	cli, err := l.EtcdClientFor(l.Spec.ClientURLs()...)
	if err != nil {
		t.Fatal(err)
	}
	w := &voterWatch{stopCh: make(chan struct{}), done: make(chan struct{}), min: 1 << 30}
	go func() {
		defer close(w.done)
		defer cli.Close()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stopCh:
				return
			case <-tick.C:
			}
			w.poll(cli)
		}
	}()
	return w
}

func (w *voterWatch) poll(cli *clientv3.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return // the quorum prober of the invariant checker judges outages
	}
	healthy, names := 0, []string{}
	for _, m := range ml.Members {
		if m.IsLearner || len(m.ClientURLs) == 0 {
			continue
		}
		sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := cli.Status(sctx, m.ClientURLs[0])
		scancel()
		if err == nil {
			healthy++
			names = append(names, m.Name)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	switch {
	case healthy < w.min:
		w.min, w.lows = healthy, []string{fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), names)}
	case healthy == w.min && len(w.lows) < 5:
		w.lows = append(w.lows, fmt.Sprintf("%s %v", time.Now().Format("15:04:05.000"), names))
	}
}

func (w *voterWatch) stop() (int, []string) {
	close(w.stopCh)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.min, w.lows
}

// TestMoveRefusedWhileTheSnapshotStoreIsAway: with the store unreachable
// (the S3 server stopped; the shared filesystem's dir gone), the move is
// refused with its reason before anything changes: the member list, the
// target Node and every journal are as before.
func TestMoveRefusedWhileTheSnapshotStoreIsAway(t *testing.T) {
	for _, kind := range []string{lab.SnapshotStoreS3, lab.SnapshotStoreFile} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			l := newLab(t, lab.Options{Nodes: 3, Agents: true, SnapshotStore: kind})
			kc, err := l.KubeClient()
			if err != nil {
				t.Fatal(err)
			}
			n4, err := l.AddNode(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.PlaceNewMember(n4.Name); err != nil {
				t.Fatal(err)
			}
			before := mustMembers(t, l)
			st := l.Spec.SnapshotStore
			if kind == lab.SnapshotStoreS3 {
				if err := st.Stop(); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Rename(st.Dir, st.Dir+".away"); err != nil {
				t.Fatal(err)
			}
			lr, err := nodereport.RequestMove(ctx, kc, "node2", "node4", false, 2*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("answer: %+v", lr)
			if lr.Result != nodereport.ResultRefused || lr.Reason != string(plan.ReasonSnapshotStoreUnreached) {
				t.Fatalf("move with the store away: %+v", lr)
			}
			if after := mustMembers(t, l); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("membership changed: %v -> %v", before, after)
			}
			n, err := kc.CoreV1().Nodes().Get(ctx, "node4", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := n.Annotations[nodereport.AnnotationRecover]; ok {
				t.Fatalf("node4 was asked (%s=%s) although the move was refused", nodereport.AnnotationRecover, v)
			}
			for _, node := range []string{"node2", "node4"} {
				if j, ok := loadJournal(t, l, node, node); ok {
					t.Fatalf("%s opened a recovery: %+v", node, j)
				}
			}
		})
	}
}
