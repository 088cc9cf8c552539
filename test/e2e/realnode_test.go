package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/lab/realnode"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestShippedDaemonSetRunsUnderARealKubelet runs node3 as a real node
// (docs/management-lab.md, "The real node"): the real kubelet, containerd
// and runc in namespaces of its own, a kubeadm etcd static pod whose etcd
// runs through the gate (installed by an init container, as
// docs/recovery.md tells users), and the agent as the shipped
// deploy/daemonset with only its image and node selector set. Then:
// (a) the node, the DaemonSet and the securityContext are what a real
// cluster gets; (f) the etcd manifest deleted by hand is put back, the same
// member serves; (e) a member wiped and SIGKILLed inside the grace is held
// by the gate in the container the kubelet restarts, and healed; (b) a
// wiped running member heals; all with no API write failed;
// (c) a rejoin asked by annotating the Node, during which the agent's pod
// is deleted, resumes in the DaemonSet's next pod and succeeds; (d) lab
// down leaves nothing of the node on the machine.
func TestShippedDaemonSetRunsUnderARealKubelet(t *testing.T) {
	if why := lab.RealNodeUnavailable(binDir); why != "" {
		t.Fatalf("this machine cannot run the real node: %s (make test builds its parts; run as root)", why)
	}
	// The real node's agent keeps the shipped settings (a 60 s grace)
	// but for the manifest restore delay (3 min shipped).
	l := newLab(t, lab.Options{Nodes: 3, EtcdTLS: true, RealNode: true, Agents: true,
		AgentArgs:        []string{"--grace-period=" + killGrace.String()},
		RealNodeAgentEnv: map[string]string{"ETCD_AGENT_MANIFEST_RESTORE_DELAY": restoreDelay.String()}})
	ctx := context.Background()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			_ = l.CollectRealNodeLogs()
		}
	})

	// (a) What the real kubelet reports and runs.
	node, err := kc.CoreV1().Nodes().Get(ctx, "node3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := node.Status.NodeInfo
	if !strings.HasPrefix(info.KubeletVersion, "v1.37.") || !strings.HasPrefix(info.ContainerRuntimeVersion, "containerd://2.") {
		t.Fatalf("node3 reports kubelet %q runtime %q: not the real kubelet and containerd", info.KubeletVersion, info.ContainerRuntimeVersion)
	}
	lease, err := kc.CoordinationV1().Leases("kube-node-lease").Get(ctx, "node3", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "node3" {
		t.Fatalf("node3's node Lease: %v %v (the kubelet renews it as system:node:node3)", lease, err)
	}
	t.Logf("node3: kubelet %s, %s, %s", info.KubeletVersion, info.ContainerRuntimeVersion, info.OSImage)
	etcdPod, err := kc.CoreV1().Pods("kube-system").Get(ctx, "etcd-node3", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the etcd static pod's mirror pod: %v", err)
	}
	if s := etcdPod.Status.InitContainerStatuses; len(s) != 1 || s[0].State.Terminated == nil || s[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("etcd pod's install-gate init container: %+v, want exited 0", s)
	}
	agentPod := shippedAgentPod(t, l)
	if agentPod.Spec.Containers[0].Image != lab.AgentImage || agentPod.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("agent pod %s: image %s, restarts %d", agentPod.Name, agentPod.Spec.Containers[0].Image, agentPod.Status.ContainerStatuses[0].RestartCount)
	}
	wantAgentConfined(t, l)
	// The shipped node-scope policy is in force: the agent's Node writes
	// below pass it with the token the real kubelet mounted.
	if _, err := kc.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, "etcd-agent-node-scope", metav1.GetOptions{}); err != nil {
		t.Fatalf("the shipped node-scope policy binding was not applied: %v", err)
	}
	waitAgentState(t, l, "node3", "healthy", "ok", 30*time.Second)
	if v, err := metricValue(l, "node3", "etcd_agent_member_state", map[string]string{"state": "healthy"}); err != nil || v != 1 {
		t.Fatalf("node3's agent over the veth: member_state healthy %v (%v)", v, err)
	}
	if st := node.Annotations[nodereport.AnnotationStatus]; st == "" {
		eventually(t, 30*time.Second, "node3's status annotation, written through the in-cluster config", func() error {
			n, err := kc.CoreV1().Nodes().Get(ctx, "node3", metav1.GetOptions{})
			if err != nil || n.Annotations[nodereport.AnnotationStatus] == "" {
				return fmt.Errorf("no %s (%v)", nodereport.AnnotationStatus, err)
			}
			return nil
		})
	}

	// (f) The etcd manifest deleted by hand: the real kubelet stops the
	// pod; the agent puts its checkpoint back after the delay, and the same
	// member serves again (the init container runs again, the gate passes).
	waitCheckpoint(t, l, "node3")
	before := idsByPeer(mustMembers(t, l))
	handOffs := []invariant.LeaderHandOff{}
	h := startHeal(t, l)
	handOffs = append(handOffs, steerOff(t, l, h, "node3"))
	removed := removeManifest(t, l, "node3")
	eventually(t, 60*time.Second, "the real kubelet stops node3's etcd", func() error {
		if pid, err := l.EtcdPID("node3"); err == nil {
			return fmt.Errorf("etcd still runs as pid %d", pid)
		}
		return nil
	})
	back := waitManifestBack(t, l, "node3", removed)
	if err := l.WaitHealthy(ctx, 3, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
		t.Fatalf("(f) membership changed: before %v, now %v", before, now)
	}
	assertNoRecovery(t, l, "node3", "node3")
	t.Logf("(f) node3's manifest deleted, put back after %s, the member serving again %s after the deletion",
		back.Sub(removed).Round(time.Millisecond), time.Since(removed).Round(time.Millisecond))

	// (e) node3 wiped and its etcd SIGKILLed at once, well inside the
	// grace: the real kubelet restarts the etcd container (not the init
	// container), the gate in its command holds it, and the member never
	// comes back under its old ID: it is healed.
	handOffs = append(handOffs, steerOff(t, l, h, "node3"))
	h.fault()
	if err := l.WipeDataDirContents("node3"); err != nil {
		t.Fatal(err)
	}
	// A write in flight through node3 at the SIGKILL fails (EOF): excused
	// as the SIGKILL's, as in every other test that kills a member (seen
	// failing: 1 of 2,170 API writes, an unexcused "error reading from
	// server: EOF" 52 ms after the kill).
	if err := h.chk.HardFault(func() error { _, err := l.KillMember("node3"); return err }); err != nil {
		t.Fatal(err)
	}
	j := h.waitHealed("node3", "node3", 3, 3*time.Minute)
	if uint64(j.OldMemberID) != before[peerOf(t, l, "node3")] || j.NewMemberID == 0 {
		t.Fatalf("(e) journal old %x new %x, want %x replaced", uint64(j.OldMemberID), uint64(j.NewMemberID), before[peerOf(t, l, "node3")])
	}
	if err := l.CollectRealNodeLogs(); err != nil {
		t.Fatal(err)
	}
	// Whoever is first, the kubelet restarting the container (its gate
	// holds) or the agent parking the manifest, the old ID never serves
	// again after the fault.
	oldID := fmt.Sprintf("%x", before[peerOf(t, l, "node3")])
	for _, e := range logEntries(t, etcdLog(t, l, "node3"), "published local member to cluster") {
		if entryTime(t, e).After(h.faultAt) && e["local-member-id"] == oldID {
			t.Fatalf("(e) the wiped member came back under its old ID %s: %v", oldID, e)
		}
	}
	var verdicts []string
	for _, msg := range []string{"start gate holds etcd back", "start gate open"} {
		for _, e := range logEntries(t, etcdLog(t, l, "node3"), msg) {
			if entryTime(t, e).After(h.faultAt) {
				verdicts = append(verdicts, fmt.Sprintf("%s: %v", msg, e["reason"]))
			}
		}
	}
	t.Logf("(e) the gate's verdicts after the fault: %v", verdicts)
	t.Logf("(e) wiped and SIGKILLed node3 never back under its old ID, healed: TTR %s", j.FinishedAt.Sub(h.faultAt).Round(time.Millisecond))

	// (b) node3's data dir emptied while its etcd runs (rm -rf
	// /var/lib/etcd/*: the hostPath's root stays).
	before = idsByPeer(mustMembers(t, l))
	handOffs = append(handOffs, steerOff(t, l, h, "node3"))
	h.fault()
	if err := l.WipeDataDirContents("node3"); err != nil {
		t.Fatal(err)
	}
	j = h.waitHealed("node3", "node3", 3, 3*time.Minute)
	if uint64(j.OldMemberID) != before[peerOf(t, l, "node3")] || j.NewMemberID == 0 {
		t.Fatalf("(b) journal old %x new %x, want %x replaced", uint64(j.OldMemberID), uint64(j.NewMemberID), before[peerOf(t, l, "node3")])
	}
	t.Logf("(b) wiped node3 healed by the DaemonSet's agent: TTR %s, mode %s", j.FinishedAt.Sub(h.faultAt).Round(time.Millisecond), j.RejoinMode)

	// (c) A rejoin asked on the Node; the agent's pod is deleted as soon
	// as the recovery is journaled, and the next pod finishes it.
	healed := idsByPeer(mustMembers(t, l))
	handOffs = append(handOffs, steerOff(t, l, h, "node3"))
	first := shippedAgentPod(t, l)
	h.fault()
	annotate(t, kc, "node3", map[string]any{nodereport.AnnotationRecover: "rejoin"})
	eventually(t, 60*time.Second, "node3's agent journals the rejoin", func() error {
		if j, ok := loadJournal(t, l, "node3", "node3"); !ok || !j.StartedAt.After(h.faultAt) {
			return fmt.Errorf("no new journal")
		}
		return nil
	})
	if err := kc.CoreV1().Pods(lab.AgentNamespace).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	j = h.waitHealed("node3", "node3", 3, 3*time.Minute)
	if j.Request != "rejoin" || uint64(j.OldMemberID) != healed[peerOf(t, l, "node3")] {
		t.Fatalf("(c) journal request %q old %x, want rejoin of %x", j.Request, uint64(j.OldMemberID), healed[peerOf(t, l, "node3")])
	}
	second := shippedAgentPod(t, l)
	if second.UID == first.UID {
		t.Fatalf("(c) the agent pod %s was not replaced", first.Name)
	}
	_ = l.CollectRealNodeLogs()
	if resumed := logEntries(t, agentLog(t, l, "node3"), "recovery resumed"); len(resumed) == 0 {
		t.Fatalf("(c) no agent pod logged %q: the deleted pod's recovery was not resumed", "recovery resumed")
	}
	t.Logf("(c) rejoin by annotation across an agent pod replacement (%s -> %s): took %s", first.Name, second.Name, j.FinishedAt.Sub(h.faultAt).Round(time.Millisecond))
	rep := h.finish(invariant.Options{LeaderHandOffs: handOffs})
	// The graceful faults (b) and (c) fail no API write; the SIGKILL of (e)
	// may fail the one write in flight on node3's etcd (Checker.HardFault
	// excuses at most one per path, Finish fails on any other).
	if rep.Writes.APIFailed > len(rep.AtHardFault) {
		t.Fatalf("API writes failed: %d of %d, %d of them in flight at (e)'s SIGKILL", rep.Writes.APIFailed, rep.Writes.APIAttempted, len(rep.AtHardFault))
	}

	// (d) Down leaves nothing of the node behind.
	if err := l.Down(ctx); err != nil {
		t.Fatalf("lab down: %v", err)
	}
	if left := l.RealNodeLeftovers(); len(left) > 0 {
		t.Fatalf("lab down left the real node's parts behind:\n%s", strings.Join(left, "\n"))
	}
}

// shippedAgentPod is the DaemonSet's running, ready pod on node3.
func shippedAgentPod(t *testing.T, l *lab.Lab) corev1.Pod {
	t.Helper()
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	eventually(t, 90*time.Second, "the shipped DaemonSet's pod ready on node3", func() error {
		pods, err := kc.CoreV1().Pods(lab.AgentNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=etcd-agent"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "node3" || p.DeletionTimestamp != nil {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					pod = p
					return nil
				}
			}
		}
		return fmt.Errorf("%d pods, none ready on node3", len(pods.Items))
	})
	return pod
}

// wantAgentConfined checks the shipped securityContext in the agent's
// process as runc applied it: no capabilities, no privilege escalation, the
// runtime's seccomp filter, a read-only root, /var/lib a slave mount
// (HostToContainer).
func wantAgentConfined(t *testing.T, l *lab.Lab) {
	t.Helper()
	pid, err := l.AgentPID("node3")
	if err != nil {
		t.Fatal(err)
	}
	status := readFile(t, fmt.Sprintf("/proc/%d/status", pid))
	for _, want := range []string{"CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(status, want) {
			t.Fatalf("agent process %d: no %q in its status", pid, want)
		}
	}
	var root, varLib string
	for _, line := range strings.Split(readFile(t, fmt.Sprintf("/proc/%d/mountinfo", pid)), "\n") {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		switch f[4] {
		case "/":
			root = line
		case "/var/lib":
			varLib = line
		}
	}
	if !strings.Contains(root, " ro,") || !strings.Contains(varLib, " master:") {
		t.Fatalf("agent mounts: root %q (want ro), /var/lib %q (want a slave: HostToContainer)", root, varLib)
	}
	// The node's /var/lib/kubelet (its pods' Secrets and tokens, the
	// kubelet's own credentials) is covered by an empty dir in the agent
	// (deploy/daemonset/daemonset.yaml, docs/security.md).
	n, err := l.Spec.Node("node3")
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.ReadDir(filepath.Join(n.DiskDir, "kubelet"))
	if err != nil || len(host) == 0 {
		t.Fatalf("the node's /var/lib/kubelet: %d entries, %v; want the kubelet's files", len(host), err)
	}
	seen, err := os.ReadDir(fmt.Sprintf("/proc/%d/root/var/lib/kubelet", pid))
	if err != nil || len(seen) != 0 {
		t.Fatalf("the agent sees /var/lib/kubelet: %d entries (%v); want it covered by an empty dir", len(seen), err)
	}
	// Of the node's etcd PKI (its members' server key here; kubeadm's
	// CA key too) the agent sees the CA and its client pair only.
	if host := dirNames(t, filepath.Join(realnode.Layout{NodeDir: n.NodeDir}.Kubernetes(), "pki", "etcd")); !slices.Contains(host, "server.key") {
		t.Fatalf("the node's etcd PKI %v: want the member's server.key there", host)
	}
	if seen := dirNames(t, fmt.Sprintf("/proc/%d/root/etc/kubernetes/pki/etcd", pid)); !slices.Equal(seen, []string{"ca.crt", "healthcheck-client.crt", "healthcheck-client.key"}) {
		t.Fatalf("the agent sees the etcd PKI files %v: want only ca.crt and the healthcheck-client pair", seen)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
