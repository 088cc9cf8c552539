package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLabUpGivesThreeHealthyVotersAndAReadyAPI: scenario (a).
func TestLabUpGivesThreeHealthyVotersAndAReadyAPI(t *testing.T) {
	l := shared(t)
	ctx := context.Background()
	st := l.Status(ctx)
	voters, healthy := st.Healthy()
	if voters != 3 || healthy != 3 || st.LeaderID == "" || !st.APIReady {
		t.Fatalf("want 3 healthy voters, a leader and a ready API; got %s api=%v %s", st.Summary(), st.APIReady, st.APIError)
	}
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 3 {
		t.Fatalf("want a Node object per lab node, got %d", len(nodes.Items))
	}
	if _, err := kc.CoordinationV1().Leases(lab.AgentNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("coordination.k8s.io/v1 leases: %v", err)
	}
	// etcdctl, as a person would use it, lists 3 started members.
	out, err := exec.Command(binDir+"/etcdctl", "--endpoints="+strings.Join(l.Spec.ClientURLs(), ","), "member", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("etcdctl member list: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), ", started,"); n != 3 {
		t.Fatalf("etcdctl lists %d started members, want 3:\n%s", n, out)
	}
	// Writes through the API and to etcd succeed, and all invariants hold.
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	chk, err := invariant.Start(ctx, kc, cli)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "20 acknowledged API writes", func() error {
		if r := chk.Writer.Snapshot(); r.APIAttempted-r.APIFailed < 20 {
			return fmt.Errorf("%d acknowledged", r.APIAttempted-r.APIFailed)
		}
		return nil
	})
	rep, err := chk.Finish(ctx, invariant.Options{LeaderHandOffs: leaderHandOffs(t, l)})
	t.Logf("invariants: %s", rep)
	if err != nil {
		t.Fatal(err)
	}
}

// TestKilledFollowerIsRestartedWithoutFailedWrites: scenario (b). A follower's
// etcd is SIGKILLed under API write load: no write fails except the one per
// path that was in flight on the victim (no etcd client resends a mutation
// whose connection broke), the supervisor restarts it and the cluster has 3
// healthy voters again.
func TestKilledFollowerIsRestartedWithoutFailedWrites(t *testing.T) {
	l := shared(t)
	ctx := context.Background()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st := l.Status(ctx)
	victim := ""
	for _, m := range st.Members {
		if !m.Leader && m.Node != "" {
			victim = m.Node
			break
		}
	}
	if victim == "" {
		t.Fatalf("no follower to kill: %s", st.Summary())
	}
	chk, err := invariant.Start(ctx, kc, cli)
	if err != nil {
		t.Fatal(err)
	}
	waitWrites(t, chk, 10)
	// The writes in flight on the victim die with it; HardFault lets Finish
	// tell those from a failure of the cluster.
	var pid int
	err = chk.HardFault(func() (err error) { pid, err = l.KillMember(victim); return err })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed etcd pid %d on %s", pid, victim)
	eventually(t, 30*time.Second, "supervisor restarts the member", func() error {
		newPID, err := l.EtcdPID(victim)
		if err != nil {
			return err
		}
		if newPID == pid {
			return fmt.Errorf("still the old pid %d", pid)
		}
		return nil
	})
	if err := l.WaitHealthy(ctx, 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitWrites(t, chk, 10)
	rep, err := chk.Finish(ctx, invariant.Options{LeaderHandOffs: leaderHandOffs(t, l)})
	t.Logf("invariants: %s", rep)
	if err != nil {
		t.Fatal(err)
	}
}

// waitWrites waits for n more acknowledged API writes.
func waitWrites(t *testing.T, chk *invariant.Checker, n int) {
	t.Helper()
	r := chk.Writer.Snapshot()
	base := r.APIAttempted - r.APIFailed
	eventually(t, 60*time.Second, fmt.Sprintf("%d more acknowledged API writes", n), func() error {
		r := chk.Writer.Snapshot()
		if got := r.APIAttempted - r.APIFailed - base; got < n {
			return fmt.Errorf("%d so far", got)
		}
		return nil
	})
}

// TestLabDownLeavesNoProcess: scenario (c), on a lab of its own.
func TestLabDownLeavesNoProcess(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3})
	if len(l.LiveProcesses()) < 4 {
		t.Fatalf("expected etcd x3 + supervisors + apiserver running, saw pids %v", l.LiveProcesses())
	}
	if err := l.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := l.LiveProcesses(); len(left) > 0 {
		t.Fatalf("processes left after lab down: %v", left)
	}
}
