package supervisor

import (
	"context"
	"encoding/json"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// heartbeat registers the Node, then renews its status and node Lease every
// Heartbeat until ctx ends, as the kubelet does: the real node-lifecycle
// controller marks the Node NotReady and taints it once both go stale.
func (k *kubelet) heartbeat(ctx context.Context) {
	every(ctx, k.cfg.Heartbeat, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, k.cfg.Heartbeat+5*time.Second)
		defer cancel()
		node, err := k.ensureNode(ctx)
		if err == nil {
			err = k.renewLease(ctx, node)
		}
		if err == nil {
			err = k.updateNodeStatus(ctx)
		}
		if err != nil && ctx.Err() == nil {
			k.log.Warn("lab kubelet: node heartbeat failed", zap.Error(err))
		}
	})
}

func (k *kubelet) ensureNode(ctx context.Context) (*corev1.Node, error) {
	nodes := k.cfg.Client.CoreV1().Nodes()
	n, err := nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return n, err
	}
	labels := map[string]string{"kubernetes.io/hostname": k.cfg.NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	for key, v := range k.cfg.NodeLabels {
		labels[key] = v
	}
	n, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Labels: labels}}, metav1.CreateOptions{})
	if err == nil {
		k.log.Info("lab kubelet: node registered")
	}
	return n, err
}

// updateNodeStatus patches the Node's status, as the kubelet does: a patch
// carries only what the kubelet owns, so it never races the taints and
// conditions the node-lifecycle controller writes (NodeRestriction refuses
// an update whose stale copy would "modify taints").
func (k *kubelet) updateNodeStatus(ctx context.Context) error {
	now := metav1.Now()
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: k.transition(t, s, now)}
	}
	status := corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.cfg.NodeIP}, {Type: corev1.NodeHostName, Address: k.cfg.NodeName}},
		NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v0.0.0-lab", OperatingSystem: "linux", Architecture: "amd64"},
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
		},
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = k.cfg.Client.CoreV1().Nodes().Patch(ctx, k.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// transition is when condition t last took status s as this kubelet posted
// it (a kubelet that restarts starts the clock again, as a real one does).
func (k *kubelet) transition(t corev1.NodeConditionType, s corev1.ConditionStatus, now metav1.Time) metav1.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conditions == nil {
		k.conditions = map[corev1.NodeConditionType]nodeCondition{}
	}
	if c, ok := k.conditions[t]; ok && c.status == s {
		return c.since
	}
	k.conditions[t] = nodeCondition{status: s, since: now}
	return now
}

type nodeCondition struct {
	status corev1.ConditionStatus
	since  metav1.Time
}

// renewLease renews kube-node-lease/<node>, owned by the Node as the
// kubelet's is (the garbage collector removes it with the Node).
func (k *kubelet) renewLease(ctx context.Context, node *corev1.Node) error {
	leases := k.cfg.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.cfg.NodeName), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}
