package agent

import (
	"strconv"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	corev1 "k8s.io/api/core/v1"
)

// targetAnswer is the target agent's answer to this move on pod (bound to
// the target): its last-recovery when its moveFrom names this node's pod
// (the move's seed named it so), nil otherwise.
func targetAnswer(pod *corev1.Pod, pm membersource.PodMember, node, target string) *plan.MoveAnswer {
	if pod == nil || target == "" || pod.Spec.NodeName != target {
		return nil
	}
	lr, ok, err := nodereport.LastRecoveryFrom(pod.Annotations)
	if err != nil || !ok || lr.MoveFrom != pm.Key+"@"+node || strings.HasPrefix(lr.Request, plan.ActionMoveAway) {
		return nil
	}
	id, _ := strconv.ParseUint(lr.MemberID, 16, 64)
	return &plan.MoveAnswer{Result: lr.Result, Reason: lr.Reason, Message: lr.Message, MemberID: id, ThisAsk: true}
}
