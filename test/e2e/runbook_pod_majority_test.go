package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/survivor"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestPodMajorityLostRestoreFromTheSurvivorRunsAsWritten (issue 44): a
// hosted cluster (a StatefulSet on local PVs, agents on every management
// node) loses two of its three members' PVs. The agents refuse
// (majority-lost) and change nothing. management-nodes.md's "Majority lost"
// blocks, run as written (dry runs first: they change nothing), bring the
// cluster back from the survivor: its gate starts it once with
// --force-new-cluster, and the agents rejoin the two others. Then every
// write acknowledged before the loss is there, the survivor kept its
// member ID, the others serve under new IDs, HashKV is equal, and the
// request was set aside (a restart is a plain one).
func TestPodMajorityLostRestoreFromTheSurvivorRunsAsWritten(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, lab.Options{Management: true, Nodes: 3, HostedClusters: 1, Agents: true})
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ns := l.Spec.Management.HostedClusters[0]
	placement := checkHostedPlacement(t, l, kc, ns)
	const survivorPod = "etcd-0"
	lostPods := []string{"etcd-1", "etcd-2"}
	ids := map[string]string{}
	for _, pod := range append([]string{survivorPod}, lostPods...) {
		ids[pod] = hostedMemberID(t, l, ns, pod)
	}
	cli, err := l.HostedEtcdClient(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const writes = 300
	for i := range writes {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.Put(wctx, fmt.Sprintf("/restore/%04d", i), fmt.Sprintf("v%d", i))
		cancel()
		if err != nil {
			t.Fatalf("write %d before the loss: %v", i, err)
		}
	}
	// Both PVs lost, then both etcds killed at once (a wiped etcd serves
	// on from its open files): the quorum goes in one step, before any
	// agent could heal one of them.
	for _, pod := range lostPods {
		if err := l.WipePodData(ctx, ns, pod); err != nil {
			t.Fatal(err)
		}
	}
	for _, pod := range lostPods {
		if _, err := l.SignalPod(ctx, ns, pod, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	survivorNode := placement[survivorPod]
	survivorState := lab.HostedMemberStateDir(*mustNode(t, l, survivorNode), ns, survivorPod)
	eventually(t, 2*time.Minute, "the survivor's agent refuses majority-lost", func() error {
		st, err := agent.PodMembersStatus(mustNode(t, l, survivorNode).StateDir)
		if err != nil {
			return err
		}
		for _, s := range st {
			if s.Pod == ns+"/"+survivorPod {
				if !s.Report.MajorityLost || s.Report.Decision == nil || s.Report.Decision.Reason != plan.ReasonMajorityLost {
					return fmt.Errorf("majority lost %v, decision %+v", s.Report.MajorityLost, s.Report.Decision)
				}
				return nil
			}
		}
		return fmt.Errorf("no report of %s/%s in %v", ns, survivorPod, st)
	})
	for pod, id := range ids {
		if got := hostedMemberID(t, l, ns, pod); got != "" && got != id {
			t.Fatalf("%s changed while the majority was lost: %s -> %s", pod, id, got)
		}
	}

	// status --cluster on the survivor's node names it and prints the
	// procedures with its values: etcd-1's agent reached by --agent-url,
	// etcd-2's found through the API (its pod's node's InternalIP and the
	// agent port).
	args := []string{"status", "--member-source=pods", "--state-dir", mustNode(t, l, survivorNode).StateDir, "--cluster", "--pod", ns + "/" + survivorPod,
		"--kubeconfig", l.Spec.APIServer.Kubeconfig, "--agent-url", "etcd-1=" + mustNode(t, l, placement["etcd-1"]).AgentURL()}
	u, err := url.Parse(mustNode(t, l, placement["etcd-2"]).AgentURL())
	if err != nil {
		t.Fatal(err)
	}
	args = append(args, "--agent-port", u.Port())
	var ans clusterAnswer
	eventually(t, 90*time.Second, "status --cluster names "+survivorPod+" and prints its commands", func() error {
		out, code := runStatus(t, append(args, "-o", "json"))
		if code != 3 {
			return fmt.Errorf("exit %d, want 3 (majority lost):\n%s", code, out)
		}
		ans = clusterAnswer{}
		if err := json.Unmarshal(out, &ans); err != nil {
			return fmt.Errorf("%v:\n%s", err, out)
		}
		c := ans.Choice
		if c.Survivor == nil || c.Survivor.Name != survivorPod || c.Survivor.Pod != ns+"/"+survivorPod {
			return fmt.Errorf("survivor %+v, refused %q", c.Survivor, c.Refused)
		}
		for _, m := range c.Members {
			// (A wiped member's etcd, killed, may leave a half-made dir
			// behind: missing, empty or corrupt, each with nothing to keep.)
			if m.Name != survivorPod && (m.Problem == "" || m.Source != "" || m.Node != placement[m.Name]) {
				return fmt.Errorf("%s: %+v", m.Name, m)
			}
		}
		if s := c.Survivor; s.HashRevision == 0 {
			return fmt.Errorf("no hash of the survivor's data (its etcd answers HashKV without a leader): %s", s.HashNote)
		}
		if ans.CommandsError != "" || len(ans.Steps) != 2 {
			return fmt.Errorf("commands: %d steps, error %q; want the request and the restart", len(ans.Steps), ans.CommandsError)
		}
		return nil
	})
	survivorHash := *ans.Choice.Survivor
	table, _ := runStatus(t, args)
	if !strings.Contains(string(table), "MAJORITY LOST. Restore from "+survivorPod) || !strings.Contains(string(table), "### 1. on "+survivorNode+": pod-force-request") {
		t.Fatalf("status --cluster's table:\n%s", table)
	}
	t.Logf("status --cluster's table:\n%s", table[:min(len(table), 1200)])
	// The printed scripts are the marked procedures, with this cluster's values.
	for i, doc := range []procedure{loadProcedure(t, "pod-force-request"), loadProcedure(t, "pod-force-restart")} {
		name := doc.name
		if ans.Steps[i].Procedure != name || (i == 0) != (name == survivor.ProcedurePodForceRequest) {
			t.Fatalf("step %d is %s, want %s", i+1, ans.Steps[i].Procedure, name)
		}
		for _, line := range strings.Split(doc.steps[len(doc.steps)-1].Script, "\n") {
			if strings.HasPrefix(line, "kubectl") || strings.HasPrefix(line, "for i in") || strings.HasPrefix(line, "mv ") {
				if !strings.Contains(ans.Steps[i].Script, line) {
					t.Fatalf("step %d (%s) lacks the procedure's line %q:\n%s", i+1, name, line, ans.Steps[i].Script)
				}
			}
		}
	}
	root := t.TempDir()
	env := append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"), "KUBECONFIG="+l.Spec.APIServer.Kubeconfig)
	run := func(i int, extra ...string) {
		s := ans.Steps[i]
		start := time.Now()
		out, err := runPrinted(ctx, s.Script, root, env, extra...)
		if err != nil || len(extra) > 0 && !strings.Contains(string(out), "DRY RUN: checks passed") {
			t.Fatalf("step %d (%s on %s, %q) failed after %s: %v\n%s\n--- script:\n%s", i+1, s.Procedure, s.Node, extra, time.Since(start).Round(time.Millisecond), err, out, s.Script)
		}
		t.Logf("step %d: %s on %s ran as printed %q in %s", i+1, s.Procedure, s.Node, extra, time.Since(start).Round(time.Millisecond))
	}
	// Dry runs first: checks only, nothing changed.
	podUID := mustPod(t, kc, ns, survivorPod).UID
	run(0, "DRY_RUN=1")
	run(1, "DRY_RUN=1")
	if _, err := os.Stat(filepath.Join(survivorState, memberruntime.ForceFile)); !os.IsNotExist(err) {
		t.Fatalf("the dry run wrote the request: %v", err)
	}
	if got := mustPod(t, kc, ns, survivorPod).UID; got != podUID {
		t.Fatalf("the dry runs restarted the survivor's pod: %s -> %s", podUID, got)
	}
	// Two requests in one cluster: the first one armed holds the cluster's
	// Lease, and the other waits unarmed (its gate would refuse it). Here
	// a request on etcd-1 (its gate holds: its data is gone) is armed by
	// its agent; the survivor's request script then fails, withdraws its
	// request and says who holds the Lease.
	otherState := lab.HostedMemberStateDir(*mustNode(t, l, placement["etcd-1"]), ns, "etcd-1")
	otherReq := fmt.Sprintf(`{"memberID":%q,"requestedAt":%q}`, ids["etcd-1"], time.Now().UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(otherState, memberruntime.ForceFile), []byte(otherReq), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "etcd-1's agent arms its request", func() error {
		m, err := memberruntime.ReadForceArm(otherState)
		if err != nil || m == nil {
			b, _ := os.ReadFile(filepath.Join(otherState, memberruntime.NotArmedFile))
			return fmt.Errorf("mark %v, %v; not armed: %s", m, err, b)
		}
		return nil
	})
	if out, err := runPrinted(ctx, ans.Steps[0].Script, root, env, "ARM_WAIT=3"); err == nil || !strings.Contains(string(out), "etcd-1/force-new-cluster") {
		t.Fatalf("the survivor's request, with etcd-1's armed: %v\n%s", err, out)
	} else {
		t.Logf("the survivor's request waits unarmed while etcd-1's is armed: %s", lastLine(out))
	}
	if _, err := os.Stat(filepath.Join(survivorState, memberruntime.ForceFile)); !os.IsNotExist(err) {
		t.Fatalf("an unarmed request was left in place: %v", err)
	}
	if err := os.Remove(filepath.Join(otherState, memberruntime.ForceFile)); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "etcd-1's agent disarms its withdrawn request", func() error {
		if m, err := memberruntime.ReadForceArm(otherState); m != nil || err != nil {
			return fmt.Errorf("mark %+v, %v", m, err)
		}
		return nil
	})

	run(0)
	run(1)

	eventually(t, time.Minute, "every member a healthy voter", func() error { return hostedVotersHealthy(ctx, l, ns) })
	if got := hostedMemberID(t, l, ns, survivorPod); got != ids[survivorPod] {
		t.Fatalf("the survivor is member %s, was %s: it must keep its ID and data", got, ids[survivorPod])
	}
	for _, pod := range lostPods {
		if got := hostedMemberID(t, l, ns, pod); got == "" || got == ids[pod] {
			t.Fatalf("%s is member %q, was %s: want it rejoined under a new ID", pod, got, ids[pod])
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := cli.Get(rctx, "/restore/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != writes {
		t.Fatalf("%d of the %d writes acknowledged before the loss are back", len(resp.Kvs), writes)
	}
	for i, kv := range resp.Kvs {
		if want := fmt.Sprintf("v%d", i); string(kv.Value) != want {
			t.Fatalf("%s = %q, want %q", kv.Key, kv.Value, want)
		}
	}
	h, err := invariant.CheckHashKV(ctx, cli, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The hash status --cluster gave of the survivor's data, at its
	// revision: every restored member holds exactly that.
	for _, ep := range cli.Endpoints() {
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		hs, err := cli.HashKV(hctx, ep, survivorHash.HashRevision)
		cancel()
		if err != nil || hs.Hash != survivorHash.Hash {
			t.Fatalf("%s: HashKV at revision %d: %v, %v; status --cluster said the survivor's data hashes to %d", ep, survivorHash.HashRevision, hs, err, survivorHash.Hash)
		}
	}
	// The survivor's agent let go of the Lease once its member served
	// with a quorum (the others' agents took it to rejoin them).
	if m, err := memberruntime.ReadForceArm(survivorState); m != nil || err != nil {
		t.Fatalf("the survivor's request still armed after the restore: %+v, %v", m, err)
	}
	used, _ := filepath.Glob(filepath.Join(survivorState, memberruntime.ForceFile+".used-*"))
	if len(used) != 1 {
		t.Fatalf("the used request set aside: %v, want one", used)
	}
	if _, err := os.Stat(filepath.Join(survivorState, memberruntime.ForceFile)); !os.IsNotExist(err) {
		t.Fatalf("the request is still in place: %v", err)
	}
	t.Logf("restored from %s (%s) on %s: %d writes back, HashKV %v (at revision %d: %d on every member, as status --cluster said); members now %s %s %s", survivorPod, ids[survivorPod], survivorNode, writes, h,
		survivorHash.HashRevision, survivorHash.Hash,
		hostedMemberID(t, l, ns, "etcd-0"), hostedMemberID(t, l, ns, "etcd-1"), hostedMemberID(t, l, ns, "etcd-2"))
}

// runPrinted runs a script status --cluster printed, as printed (its
// /root/ files under root), bounded.
func runPrinted(ctx context.Context, script, root string, env []string, extra ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", strings.ReplaceAll(script, "/root/", root+"/"))
	cmd.Env = append(slices.Clone(env), extra...)
	return cmd.CombinedOutput()
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
