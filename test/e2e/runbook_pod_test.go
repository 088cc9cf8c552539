package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestUC3ByHandForAStatefulSetMemberRunsAsWritten (issue 16): recovery.md's
// UC3 by hand for a StatefulSet member, run as written in the management
// lab with the agents at --auto-heal=false (the fallback when the agent is
// the problem): the checks, a backup and the old PV kept (uc3-pod-prepare),
// etcd held in the pod on the old node and on the target (uc3-pod-hold),
// the member stopped, removed and its pod and claim moved to a free PV on
// the target (uc3-pod-move), then added as a learner, started by the gate
// with the printed flags and promoted (uc3-pod-start). Writes go on
// throughout; the member serves on the target under a new ID, its claim
// bound to the free PV, the old PV kept with its data, no write failed or
// lost, HashKV equal (checked by the procedure and by the checker).
func TestUC3ByHandForAStatefulSetMemberRunsAsWritten(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, lab.Options{Management: true, Nodes: 3, HostedClusters: 1, Agents: true})
	kc, err := l.KubeClient()
	if err != nil {
		t.Fatal(err)
	}
	ns := l.Spec.Management.HostedClusters[0]
	const pod = "etcd-1"
	placement := checkHostedPlacement(t, l, kc, ns)
	a := placement[pod]
	n4, err := l.AddNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	free, err := l.AddPV(ctx, n4.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitNodesReady(ctx, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.RestartAgents(ctx, "--auto-heal=false"); err != nil {
		t.Fatal(err)
	}
	// etcd-0 leads (the procedure says to hand leadership off first); the
	// backup comes from etcd-2, a follower.
	moveHostedLeaderTo(t, l, ns, placement, "etcd-0")
	endpoints := l.HostedClientURLs(ns)
	oldID := hostedMemberID(t, l, ns, pod)
	oldClaim, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, lab.HostedDataPVC(pod), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checker := startHostedCheckers(t, l, []string{ns})[ns]

	shell := t.TempDir() // the SRE's /root, where each part finds what the last left
	values := []string{"NS=clusters-a", "NS=" + ns, "B=mgmt-4", "B=" + n4.Name, "PV_B=pv-b", "PV_B=" + free.Name}
	run := func(name, node string, subst []string) {
		t.Helper()
		p := loadProcedure(t, name)
		p.onNodeIn(t, l, node, endpoints, shell)
		p.subst = subst
		p.run(t, 5*time.Minute)
	}
	start := time.Now()
	run("uc3-pod-prepare", a, append(slices.Clone(values), "SRC=http://10.0.1.10:2379", "SRC="+endpoints[2]))
	run("uc3-pod-hold", a, values[:2])
	run("uc3-pod-hold", n4.Name, values[:2])
	run("uc3-pod-move", a, values)
	run("uc3-pod-start", n4.Name, values[:2])
	took := time.Since(start)

	if err := hostedVotersHealthy(ctx, l, ns); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the pod Ready on "+n4.Name, func() error {
		if p := mustPod(t, kc, ns, pod); p.Spec.NodeName != n4.Name || !lab.PodReady(p) {
			return fmt.Errorf("pod on %q ready %v", p.Spec.NodeName, lab.PodReady(p))
		}
		return nil
	})
	newID := hostedMemberID(t, l, ns, pod)
	if newID == "" || newID == oldID {
		t.Fatalf("member %q after the move (was %s)", newID, oldID)
	}
	claim, err := kc.CoreV1().PersistentVolumeClaims(ns).Get(ctx, lab.HostedDataPVC(pod), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if claim.UID == oldClaim.UID || claim.Spec.VolumeName != free.Name {
		t.Fatalf("claim %s (uid %s, was %s) bound to %q, want %s", claim.Name, claim.UID, oldClaim.UID, claim.Spec.VolumeName, free.Name)
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, oldClaim.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Fatalf("old PV %s: reclaim policy %s", pv.Name, pv.Spec.PersistentVolumeReclaimPolicy)
	}
	if _, err := os.Stat(filepath.Join(pv.Spec.Local.Path, "data", "member", "snap", "db")); err != nil {
		t.Fatalf("the old member's data on %s: %v", pv.Name, err)
	}
	// The hold stays on the old node (its PV has the old member's data).
	if _, err := os.Stat(filepath.Join(lab.HostedMemberStateDir(*mustNode(t, l, a), ns, pod), memberruntime.HoldFile)); err != nil {
		t.Fatalf("the hold on %s: %v", a, err)
	}
	if _, err := os.Stat(filepath.Join(shell, pod+"-backup.db")); err != nil {
		t.Fatalf("the backup: %v", err)
	}
	r, err := checker.Finish(ctx, invariant.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s/%s moved by hand %s -> %s in %s (member %s -> %s); %s", ns, pod, a, n4.Name, took.Round(100*time.Millisecond), oldID, newID, r)
}
