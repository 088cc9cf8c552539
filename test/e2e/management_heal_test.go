package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/clusterrecord"
	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// TestManagementAgentsHealWipedPVs (issue 14, UC2 on StatefulSet pods): 3
// management nodes, 3 hosted etcd clusters, one agent per node serving every
// member pod bound to it. The PV data of one member in each of two clusters
// is lost while etcd runs; each node's agent heals its member (stop = hold at
// the start gate + a graceful pod delete; quarantine inside the PV; learner;
// seed; start = release the gate; promote), the two clusters at once under
// their own Leases, with no failed write and HashKV equal per cluster. The
// third cluster is left alone.
func TestManagementAgentsHealWipedPVs(t *testing.T) {
	l := newLab(t, lab.Options{Management: true, Nodes: 3, HostedClusters: 3, Agents: true})
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clusters := l.Spec.Management.HostedClusters
	runAgentsAsShippedManagementRBAC(t, l, kc)
	placement := map[string]map[string]string{}
	for _, ns := range clusters {
		placement[ns] = checkHostedPlacement(t, l, kc, ns)
	}
	checkers := startHostedCheckers(t, l, clusters)
	untouched := clusters[2]
	idsUntouched := hostedMemberIDs(t, l, untouched)
	type target struct{ ns, pod, node, oldID, pvDir string }
	targets := []target{{ns: clusters[0], pod: "etcd-1"}, {ns: clusters[1], pod: "etcd-2"}}
	for i := range targets {
		tg := &targets[i]
		tg.node = placement[tg.ns][tg.pod]
		tg.oldID = hostedMemberID(t, l, tg.ns, tg.pod)
		dir, err := l.PodDataDir(ctx, tg.ns, tg.pod)
		if err != nil {
			t.Fatal(err)
		}
		tg.pvDir = filepath.Dir(dir)
	}
	faultAt := time.Now()
	for _, tg := range targets {
		if err := l.WipePodData(ctx, tg.ns, tg.pod); err != nil {
			t.Fatal(err)
		}
	}
	for _, tg := range targets {
		stateDir := lab.HostedMemberStateDir(*mustNode(t, l, tg.node), tg.ns, tg.pod)
		var j journal.Record
		eventually(t, 3*time.Minute, tg.ns+"/"+tg.pod+" healed by the agent on "+tg.node, func() error {
			var ok bool
			var err error
			if j, ok, err = journal.Load(stateDir, tg.pod); err != nil || !ok {
				return fmt.Errorf("journal: ok=%v %v", ok, err)
			}
			if j.Result != journal.ResultSucceeded {
				return fmt.Errorf("journal phase %s result %q", j.Phase, j.Result)
			}
			id := hostedMemberID(t, l, tg.ns, tg.pod)
			if id == tg.oldID {
				return fmt.Errorf("still member %s", id)
			}
			if err := hostedVotersHealthy(ctx, l, tg.ns); err != nil {
				return err
			}
			if p := mustPod(t, kc, tg.ns, tg.pod); !lab.PodReady(p) || p.Spec.NodeName != tg.node {
				return fmt.Errorf("pod on %s ready %v", p.Spec.NodeName, lab.PodReady(p))
			}
			return nil
		})
		logPhases(t, j)
		t.Logf("%s/%s on %s: member %s -> %x, healed %s after the fault (started %s, finished %s)", tg.ns, tg.pod, tg.node, tg.oldID, uint64(j.NewMemberID),
			j.FinishedAt.Sub(faultAt).Round(100*time.Millisecond), j.StartedAt.Sub(faultAt).Round(100*time.Millisecond), j.FinishedAt.Format(time.TimeOnly))
		// Nothing deleted: the pre-change snapshot is kept inside the PV.
		qdir := filepath.Join(tg.pvDir, "etcd-agent-quarantine")
		if j.SnapshotPath == "" || filepath.Dir(j.SnapshotPath) != qdir {
			t.Fatalf("snapshot %q, want one in %s (the PV's own filesystem)", j.SnapshotPath, qdir)
		}
		if st, err := os.Stat(j.SnapshotPath); err != nil || st.Size() == 0 {
			t.Fatalf("pre-change snapshot %s: %v", j.SnapshotPath, err)
		}
		// Reported on the pod, as on the Node for a static pod.
		eventually(t, 30*time.Second, tg.ns+"/"+tg.pod+": last-recovery and a RecoverySucceeded Event on the pod", func() error {
			p := mustPod(t, kc, tg.ns, tg.pod)
			lr, ok, err := nodereport.LastRecoveryFrom(p.Annotations)
			if err != nil || !ok || lr.Result != nodereport.ResultSucceeded {
				return fmt.Errorf("last-recovery %+v ok=%v err=%v", lr, ok, err)
			}
			evs, err := kc.CoreV1().Events(tg.ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
				"involvedObject.kind": "Pod", "involvedObject.name": tg.pod, "reason": nodereport.ReasonRecoverySucceeded}.String()})
			if err != nil || len(evs.Items) == 0 {
				return fmt.Errorf("no RecoverySucceeded event (%v)", err)
			}
			return nil
		})
		// `etcd-agent status --member-source=pods` on the node lists every
		// member it serves from its latest report (exit code: the worst
		// member's; the other cluster's heal may still run on this node).
		out, err := exec.Command(agentBinary, "status", "--member-source=pods", "--state-dir", mustNode(t, l, tg.node).StateDir).CombinedOutput()
		var exitErr *exec.ExitError
		if err != nil && !errorsAs(err, &exitErr) {
			t.Fatalf("status on %s: %v\n%s", tg.node, err, out)
		}
		for _, ns := range clusters {
			for pod, node := range placement[ns] {
				if node != tg.node {
					continue
				}
				line := ""
				for _, ln := range strings.Split(string(out), "\n") {
					if strings.HasPrefix(ln, ns+"/"+pod+" ") {
						line = ln
					}
				}
				if line == "" || strings.Contains(line, "no such file") || (ns == tg.ns && pod == tg.pod && !strings.Contains(line, " HEALTHY ")) {
					t.Fatalf("status on %s: %s/%s is not listed with its latest report (healthy, for the healed one):\n%s", tg.node, ns, pod, out)
				}
			}
		}
		t.Logf("etcd-agent status --member-source=pods on %s:\n%s", tg.node, out)
	}
	// Both at once: the two recoveries overlapped (different clusters,
	// different Leases).
	j0, _, _ := journal.Load(lab.HostedMemberStateDir(*mustNode(t, l, targets[0].node), targets[0].ns, targets[0].pod), targets[0].pod)
	j1, _, _ := journal.Load(lab.HostedMemberStateDir(*mustNode(t, l, targets[1].node), targets[1].ns, targets[1].pod), targets[1].pod)
	if j0.StartedAt.After(j1.FinishedAt) || j1.StartedAt.After(j0.FinishedAt) {
		t.Fatalf("the two clusters' recoveries ran one after the other (%s-%s, %s-%s): different clusters must not wait on each other",
			j0.StartedAt.Format(time.TimeOnly), j0.FinishedAt.Format(time.TimeOnly), j1.StartedAt.Format(time.TimeOnly), j1.FinishedAt.Format(time.TimeOnly))
	}
	for _, ns := range clusters {
		r, err := checkers[ns].Finish(ctx, invariant.Options{LeaderHandOffs: leaderHandOffs(t, l), PurgeCrashes: podPurgeCrashes(t, l, ns)})
		if err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
		t.Logf("%s: %s", ns, r)
	}
	if ids := hostedMemberIDs(t, l, untouched); !slices.Equal(ids, idsUntouched) {
		t.Fatalf("%s was not broken but its members changed: %v -> %v", untouched, idsUntouched, ids)
	}
	for _, ns := range clusters {
		checkClusterRecord(t, l, kc, ns)
	}
}

func mustNode(t *testing.T, l *lab.Lab, name string) *lab.Node {
	t.Helper()
	n, err := l.Spec.Node(name)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// hostedMemberID is the hex member ID of a hosted cluster's member by name.
func hostedMemberID(t *testing.T, l *lab.Lab, ns, name string) string {
	t.Helper()
	for _, h := range l.Status(context.Background()).Hosted {
		if h.Namespace != ns {
			continue
		}
		for _, m := range h.Members {
			if m.Name == name {
				return m.ID
			}
		}
	}
	return ""
}

// hostedVotersHealthy: every member of the hosted cluster is a voter and
// answers Status.
func hostedVotersHealthy(ctx context.Context, l *lab.Lab, ns string) error {
	cli, err := l.HostedEtcdClient(ns)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		return err
	}
	if len(ml.Members) != lab.HostedEtcdReplicas {
		return fmt.Errorf("%d members", len(ml.Members))
	}
	for _, m := range ml.Members {
		if m.IsLearner || len(m.ClientURLs) == 0 {
			return fmt.Errorf("member %s (%x) learner %v, client URLs %v", m.Name, m.ID, m.IsLearner, m.ClientURLs)
		}
		if _, err := cli.Status(ctx, m.ClientURLs[0]); err != nil {
			return fmt.Errorf("member %s: %v", m.Name, err)
		}
	}
	return nil
}

// checkClusterRecord: the cluster's record of pins (a ConfigMap owned by its
// StatefulSet) names every member under the ID it serves under now.
func checkClusterRecord(t *testing.T, l *lab.Lab, kc kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	key := membersource.ClusterOf(mustPod(t, kc, ns, "etcd-0"))
	eventually(t, time.Minute, ns+": the cluster's record pins every member under its current ID", func() error {
		s := clusterrecord.Store{KC: kc, Namespace: ns, Cluster: key}
		pins, _, err := s.ReadPins(ctx)
		if err != nil {
			return err
		}
		var got []string
		for name, p := range pins {
			got = append(got, fmt.Sprintf("%s=%x", name, uint64(p.MemberID)))
		}
		slices.Sort(got)
		if want := hostedMemberIDs(t, l, ns); !slices.Equal(got, want) {
			return fmt.Errorf("record %s pins %v, the cluster lists %v", s.Where(), got, want)
		}
		cm, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, clusterrecord.Name(key), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Kind != "StatefulSet" || cm.OwnerReferences[0].Name != lab.HostedEtcdName {
			return fmt.Errorf("record owned by %+v, want the StatefulSet %s", cm.OwnerReferences, lab.HostedEtcdName)
		}
		return nil
	})
}
