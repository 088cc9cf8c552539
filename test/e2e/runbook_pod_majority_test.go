package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/agent"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/plan"

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
	const survivor = "etcd-0"
	lostPods := []string{"etcd-1", "etcd-2"}
	ids := map[string]string{}
	for _, pod := range append([]string{survivor}, lostPods...) {
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
	survivorNode := placement[survivor]
	survivorState := lab.HostedMemberStateDir(*mustNode(t, l, survivorNode), ns, survivor)
	eventually(t, 2*time.Minute, "the survivor's agent refuses majority-lost", func() error {
		st, err := agent.PodMembersStatus(mustNode(t, l, survivorNode).StateDir)
		if err != nil {
			return err
		}
		for _, s := range st {
			if s.Pod == ns+"/"+survivor {
				if !s.Report.MajorityLost || s.Report.Decision == nil || s.Report.Decision.Reason != plan.ReasonMajorityLost {
					return fmt.Errorf("majority lost %v, decision %+v", s.Report.MajorityLost, s.Report.Decision)
				}
				return nil
			}
		}
		return fmt.Errorf("no report of %s/%s in %v", ns, survivor, st)
	})
	for pod, id := range ids {
		if got := hostedMemberID(t, l, ns, pod); got != "" && got != id {
			t.Fatalf("%s changed while the majority was lost: %s -> %s", pod, id, got)
		}
	}

	endpoints := l.HostedClientURLs(ns)
	shell := t.TempDir()
	block := func(name, node string, subst ...string) procedure {
		p := loadProcedure(t, name)
		p.onNodeIn(t, l, node, endpoints, shell)
		p.subst = append([]string{"NS=clusters-a", "NS=" + ns}, subst...)
		return p
	}
	request := block("pod-force-request", survivorNode, "ID=8e9e05c52164694d", "ID="+ids[survivor])
	restart := block("pod-force-restart", survivorNode, "CLIENT=https://etcd-0.etcd-discovery.clusters-a.svc:2379", "CLIENT="+l.HostedClientURL(ns, survivor))
	// Dry runs first: checks only.
	for _, p := range []procedure{request, restart} {
		p.prelude += "export DRY_RUN=1\n"
		out, err := p.exec(t, time.Minute)
		if err != nil || !strings.Contains(string(out), "DRY RUN: checks passed") {
			t.Fatalf("%s dry run: %v\n%s", p.name, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(survivorState, memberruntime.ForceFile)); !os.IsNotExist(err) {
		t.Fatalf("the dry run wrote the request: %v", err)
	}
	request.run(t, time.Minute)
	restart.run(t, 12*time.Minute)

	eventually(t, time.Minute, "every member a healthy voter", func() error { return hostedVotersHealthy(ctx, l, ns) })
	if got := hostedMemberID(t, l, ns, survivor); got != ids[survivor] {
		t.Fatalf("the survivor is member %s, was %s: it must keep its ID and data", got, ids[survivor])
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
	used, _ := filepath.Glob(filepath.Join(survivorState, memberruntime.ForceFile+".used-*"))
	if len(used) != 1 {
		t.Fatalf("the used request set aside: %v, want one", used)
	}
	if _, err := os.Stat(filepath.Join(survivorState, memberruntime.ForceFile)); !os.IsNotExist(err) {
		t.Fatalf("the request is still in place: %v", err)
	}
	t.Logf("restored from %s (%s) on %s: %d writes back, HashKV %v; members now %s %s %s", survivor, ids[survivor], survivorNode, writes, h,
		hostedMemberID(t, l, ns, "etcd-0"), hostedMemberID(t, l, ns, "etcd-1"), hostedMemberID(t, l, ns, "etcd-2"))
}
