package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/survivor"
)

// TestStatusClusterNamesTheSurvivorAndItsCommandsRestore: the majority is
// lost and the choice matters. Five members with TLS and agents: node5
// stops early (its log behind), writes go on, node4 stops with every one
// of them on its disk, nodes 1-3 lose their data for good; node5 comes
// back and runs, but without a quorum it never serves. `etcd-agent status
// --cluster` on node5 must name node4 over node5, from what their agents
// read of their disks (node4's data dir while stopped, then the WAL of
// each while it runs and does not serve), say nodes 1-3 have no data, and
// print the commands. The agents stopped, the printed scripts run as
// printed, each on its node, in order: the cluster serves again with five
// voters, node4 under its own ID, every write node4 had on every member,
// HashKV equal.
func TestStatusClusterNamesTheSurvivorAndItsCommandsRestore(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 5, EtcdTLS: true, Agents: true})
	before := idsByPeer(mustMembers(t, l))
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(prefix string, n int) {
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cli.Put(ctx, fmt.Sprintf("survivor/%s-%03d", prefix, i), prefix)
			cancel()
			if err != nil {
				t.Fatalf("put %s-%d: %v", prefix, i, err)
			}
		}
	}
	put("all", 50)
	if err := l.StopMember("node5"); err != nil {
		t.Fatal(err)
	}
	put("after-node5", 50)
	// node4 has applied every write before it stops (a follower learns the
	// commit index at the next heartbeat).
	n4 := nodeOf(t, l, "node4")
	waitApplied(t, l, "node4", n4.ClientURL)
	for _, n := range []string{"node4", "node1", "node2", "node3"} {
		if err := l.StopMember(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"node1", "node2", "node3"} {
		if err := l.WipeDataDir(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.StartMember("node5"); err != nil {
		t.Fatal(err)
	}
	// node4's agent reads its stopped member's data dir.
	waitAgentState(t, l, "node4", "", "ok", 60*time.Second)

	args, err := l.StatusArgs("node5")
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, "--cluster")
	for _, n := range l.Spec.Nodes {
		args = append(args, "--agent-url="+n.Member+"="+strings.TrimSuffix(n.AgentMetricsURL, "/metrics"))
	}
	// node5, restarted without a quorum, runs but never serves: its agent
	// reads its WAL while etcd holds the db.
	n5 := nodeOf(t, l, "node5")
	// node4's agent hashes its stopped member's db as etcd would.
	stopped := statusCluster(t, args, n4.Member, map[string]string{n4.Member: "ok", n5.Member: "in-use"}, true).Choice.Survivor
	// The same once node4 runs too (2 of 5: no quorum, neither serves).
	if err := l.StartMember("node4"); err != nil {
		t.Fatal(err)
	}
	waitAgentState(t, l, "node4", "", "in-use", 60*time.Second)
	ans := statusCluster(t, args, n4.Member, map[string]string{n4.Member: "in-use", n5.Member: "in-use"}, false)
	table, _ := runStatus(t, args)
	if !strings.Contains(string(table), "MAJORITY LOST. Restore from "+n4.Member) || !strings.Contains(string(table), "### 9. on node") {
		t.Fatalf("status --cluster's table:\n%s", table)
	}
	t.Logf("status --cluster's table:\n%s", table[:min(len(table), 1500)])

	// What the printed text asks first: the agents stopped.
	for _, n := range l.Spec.Nodes {
		if err := os.Rename(n.AgentManifest(), filepath.Join(n.NodeDir, "etcd-agent.yaml.stopped")); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range l.Spec.Nodes {
		eventually(t, 30*time.Second, n.Name+"'s agent stopped", func() error {
			if _, err := l.AgentPID(n.Name); err == nil {
				return errors.New("still running")
			}
			return nil
		})
	}
	roots := map[string]string{}
	for _, n := range l.Spec.Nodes {
		roots[n.Member] = t.TempDir()
		if n.Name != "node4" && n.Name != "node5" {
			// The lost members' manifests, kept out of the kubelet's dir
			// where the procedures look for them.
			if err := os.Rename(n.StoppedManifest(), filepath.Join(roots[n.Member], "etcd.yaml.parked")); err != nil {
				t.Fatal(err)
			}
		}
	}
	path := "PATH=" + binDir + ":" + os.Getenv("PATH")
	run := func(i int, s survivor.Step, env ...string) string {
		script := strings.ReplaceAll(s.Script, "/root/", roots[s.Member]+"/")
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Env = append(append(os.Environ(), path), env...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("step %d (%s on %s, %q) failed after %s: %v\n%s\n--- script:\n%s", i+1, s.Procedure, s.Node, env, time.Since(start).Round(time.Millisecond), err, out, script)
		}
		t.Logf("step %d: %s on %s ran as printed %q in %s", i+1, s.Procedure, s.Node, env, time.Since(start).Round(time.Millisecond))
		return string(out)
	}
	for i, s := range ans.Steps {
		// As the printed text says: a dry run first, which changes
		// nothing on the node, then the script itself.
		n := nodeOf(t, l, s.Node)
		before := nodeFiles(t, n, roots[s.Member])
		if out := run(i, s, "DRY_RUN=1"); !strings.Contains(out, "DRY RUN: checks passed") {
			t.Fatalf("step %d's dry run did not say it passed its checks:\n%s", i+1, out)
		}
		if after := nodeFiles(t, n, roots[s.Member]); !slices.Equal(before, after) {
			t.Fatalf("step %d's dry run (%s on %s) changed the node's files:\nbefore %q\nafter  %q", i+1, s.Procedure, s.Node, before, after)
		}
		run(i, s)
	}

	if err := l.WaitHealthy(context.Background(), 5, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	after := idsByPeer(mustMembers(t, l))
	if after[n4.PeerURL] != before[n4.PeerURL] {
		t.Fatalf("node4's member %x, was %x: the survivor keeps its ID", after[n4.PeerURL], before[n4.PeerURL])
	}
	var hashes []uint32
	var rev int64
	for _, n := range l.Spec.Nodes {
		mc, err := l.EtcdClientFor(n.ClientURL)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := mc.Get(ctx, "survivor/", clientv3.WithPrefix(), clientv3.WithSerializable())
		if err == nil && rev == 0 {
			rev = resp.Header.Revision
		}
		var h, hs *clientv3.HashKVResponse
		if err == nil {
			h, err = mc.HashKV(ctx, n.ClientURL, rev)
		}
		// The hash status --cluster gave of node4's stopped data: the
		// restored cluster holds exactly that at its revision.
		if err == nil {
			hs, err = mc.HashKV(ctx, n.ClientURL, stopped.HashRevision)
		}
		cancel()
		mc.Close()
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if resp.Count != 100 {
			t.Fatalf("%s serves %d of node4's 100 keys", n.Name, resp.Count)
		}
		hashes = append(hashes, h.Hash)
		if hs.Hash != stopped.Hash {
			t.Fatalf("%s: HashKV at revision %d is %d; status --cluster said node4's stopped data hashes to %d", n.Name, stopped.HashRevision, hs.Hash, stopped.Hash)
		}
	}
	t.Logf("node4's stopped data hashed to %d at revision %d; every restored member's HashKV at it is the same", stopped.Hash, stopped.HashRevision)
	for _, h := range hashes[1:] {
		if h != hashes[0] {
			t.Fatalf("HashKV at revision %d differs: %v", rev, hashes)
		}
	}
}

// statusCluster runs status --cluster until it names want, from what its
// agent read of its data dir, with each member of dataDirs a candidate
// whose agent says that of its data dir and the others not candidates;
// it returns the answer.
func statusCluster(t *testing.T, args []string, want string, dataDirs map[string]string, withHash bool) clusterAnswer {
	t.Helper()
	var ans clusterAnswer
	eventually(t, 90*time.Second, "status --cluster names "+want+" from its agent's read of its disk", func() error {
		out, code := runStatus(t, append(args, "-o", "json"))
		if code != 3 {
			return fmt.Errorf("exit %d, want 3 (majority lost):\n%s", code, out)
		}
		ans = clusterAnswer{}
		if err := json.Unmarshal(out, &ans); err != nil {
			return fmt.Errorf("%v:\n%s", err, out)
		}
		c := ans.Choice
		if c.Survivor == nil || c.Survivor.Name != want || c.Survivor.Source != survivor.FromDataDir {
			return fmt.Errorf("survivor %+v, refused %q", c.Survivor, c.Refused)
		}
		for _, m := range c.Members {
			dd, cand := dataDirs[m.Name]
			if cand && (m.Problem != "" || m.Source != survivor.FromDataDir || m.DataDir != dd || m.Commit > c.Survivor.Commit) ||
				!cand && (m.Problem == "" || m.DataDir != "missing" && m.DataDir != "empty") {
				return fmt.Errorf("%s: %+v", m.Name, m)
			}
		}
		if s := c.Survivor; withHash && (s.HashRevision == 0 || s.HashRevision != s.Revision) {
			return fmt.Errorf("the survivor's hash: %d at revision %d (its data's newest revision %d; %s)", s.Hash, s.HashRevision, s.Revision, s.HashNote)
		}
		if ans.CommandsError != "" || len(ans.Steps) != 9 {
			return fmt.Errorf("commands: %d steps, error %q; want 4 stops, the survivor's, 4 rejoins", len(ans.Steps), ans.CommandsError)
		}
		return nil
	})
	t.Logf("status --cluster: %s; lost: %s", ans.Choice.Why, ans.Choice.Lost)
	return ans
}

// clusterAnswer is status --cluster -o json.
type clusterAnswer struct {
	Choice        survivor.Choice `json:"choice"`
	Steps         []survivor.Step `json:"steps"`
	CommandsError string          `json:"commandsError"`
}

// waitApplied waits until the member at url has applied the leader's
// committed index (its own Status against the cluster's).
func waitApplied(t *testing.T, l *lab.Lab, node, url string) {
	t.Helper()
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	eventually(t, 30*time.Second, node+" applied every committed write", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ms, err := cli.Status(ctx, url)
		if err != nil {
			return err
		}
		ls, err := cli.Status(ctx, l.Spec.ClientURLs()[0])
		if err != nil {
			return err
		}
		if ms.RaftAppliedIndex < ls.RaftIndex || ms.RaftIndex < ls.RaftIndex {
			return fmt.Errorf("applied %d, committed %d; the cluster's committed %d", ms.RaftAppliedIndex, ms.RaftIndex, ls.RaftIndex)
		}
		return nil
	})
}

// runStatus runs etcd-agent with args; its output and exit code.
func runStatus(t *testing.T, args []string) ([]byte, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, agentBinary, args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out, 0
}

// nodeFiles is what a dry run must leave as it was on node n: the names
// under its disk (data dir, quarantine: a running etcd writes inside its
// files), and the names and contents of its manifests dir and runbook dir
// (root; the checks' *.out files aside).
func nodeFiles(t *testing.T, n *lab.Node, root string) []string {
	t.Helper()
	var names []string
	for _, dir := range []string{n.DiskDir, n.ManifestsDir, root} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if dir == root && strings.HasSuffix(p, ".out") {
				return nil
			}
			names = append(names, p)
			if dir != n.DiskDir && !d.IsDir() {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				names = append(names, fmt.Sprintf("%x", sha256.Sum256(b)))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names
}
