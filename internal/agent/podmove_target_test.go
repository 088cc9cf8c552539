package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// From issue 38: the PV a move reserves must be one the scheduler binds on
// the target (its node affinity matched against the target Node's labels,
// as the scheduler does, not against the node's name) and one the target's
// agent finds on disk (a local or hostPath path in its spec).
func TestAPodMoveOffersNoPVTheTargetCannotUse(t *testing.T) {
	for _, c := range []struct {
		name string
		pv   *corev1.PersistentVolume
		node func(*corev1.Node)
		why  string
	}{
		{"the hostname label is not the node's name", localPV("a-by-name", "node9", "local", "1Gi"),
			func(n *corev1.Node) { n.Labels[corev1.LabelHostname] = "node9.lab" }, "node affinity does not match node node9"},
		{"a local PV without a path", localPV("b-no-path", "node9", "local", "1Gi", func(pv *corev1.PersistentVolume) { pv.Spec.Local.Path = "" }),
			nil, "no local or hostPath path"},
		{"a PV of no kind the agent reads", localPV("c-nfs", "node9", "local", "1Gi", func(pv *corev1.PersistentVolume) {
			pv.Spec.PersistentVolumeSource = corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/x"}}
		}), nil, "no local or hostPath path"},
	} {
		kc, pc := podMoveWorld(c.pv)
		if c.node != nil {
			n9, _ := kc.CoreV1().Nodes().Get(context.Background(), "node9", metav1.GetOptions{})
			c.node(n9)
			if _, err := kc.CoreV1().Nodes().Update(context.Background(), n9, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		f := pc.Facts(context.Background(), "node9", journal.Record{}, false)
		if f.Err != "" || f.FreePV != "" {
			t.Errorf("%s: offered PV %q (err %q), want none", c.name, f.FreePV, f.Err)
		}
		if !strings.Contains(f.PVUnusable, c.pv.Name) || !strings.Contains(f.PVUnusable, c.why) {
			t.Errorf("%s: PVUnusable %q, want it to name %s: %s", c.name, f.PVUnusable, c.pv.Name, c.why)
		}
	}
}
