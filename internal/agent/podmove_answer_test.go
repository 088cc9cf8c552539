package agent

import (
	"context"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// From issue 38: after the release the source reads the target agent's
// answer on the pod of the member's name bound to the target, when it
// answers this move (its moveFrom names this node's pod): the member it
// rejoined and the result. Another move's answer, or a pod still here, is
// no answer.
func TestAPodMoveReadsTheTargetsAnswer(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, node, from string
		want             bool
	}{
		{"the target's answer to this move", "node9", "ns/etcd-1@node1", true},
		{"another move's (from another node)", "node9", "ns/etcd-1@node5", false},
		{"the pod not on the target", "node1", "ns/etcd-1@node1", false},
	} {
		kc, pc := podMoveWorld(localPV("f-good", "node9", "local", "1Gi"))
		p, _ := kc.CoreV1().Pods("ns").Get(ctx, "etcd-1", metav1.GetOptions{})
		p.Spec.NodeName, p.UID = c.node, "pod-2"
		p.Annotations = map[string]string{nodereport.AnnotationLastRecovery: `{"request":"auto","result":"succeeded","moveFrom":"` + c.from + `","memberID":"a9","message":"verified"}`}
		if _, err := kc.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f := pc.Facts(ctx, "node9", journal.Record{ID: "rec1", Request: "move-away", MoveTarget: "node9", MoveClaimUID: "claim-1", MovePV: "old-pv"}, false)
		got := f.TargetAnswer != nil && f.TargetAnswer.Result == "succeeded" && f.TargetAnswer.MemberID == 0xa9
		if got != c.want || f.PodNode != c.node {
			t.Errorf("%s: answer %+v, pod on %q; want an answer %v", c.name, f.TargetAnswer, f.PodNode, c.want)
		}
	}
}

// From issue 38: a pod move's wait for its member on the target is bounded
// by --recovery-timeout (from the claim's release).
func TestAPodMovesDeadlineIsTheRecoveryTimeout(t *testing.T) {
	if got := (Config{RecoveryTimeout: 7 * time.Minute}).PlanConfig().MoveDeadline; got != 7*time.Minute {
		t.Fatalf("the move's deadline is %s, want --recovery-timeout (7m0s)", got)
	}
}
