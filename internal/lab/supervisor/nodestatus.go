package supervisor

import (
	"context"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
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

func (k *kubelet) updateNodeStatus(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.cfg.Client.CoreV1().Nodes().Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")}
		n.Status.Capacity, n.Status.Allocatable = capacity, capacity
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: k.cfg.NodeIP}, {Type: corev1.NodeHostName, Address: k.cfg.NodeName}}
		n.Status.NodeInfo.KubeletVersion = "v0.0.0-lab"
		n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = "linux", "amd64"
		set := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) {
			for i := range n.Status.Conditions {
				c := &n.Status.Conditions[i]
				if c.Type == t {
					if c.Status != s {
						c.LastTransitionTime = now
					}
					c.Status, c.Reason, c.LastHeartbeatTime = s, reason, now
					return
				}
			}
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: s, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now})
		}
		set(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady")
		set(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory")
		set(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure")
		set(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID")
		_, err = k.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
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
