package podfacts

import corev1 "k8s.io/api/core/v1"

// NodeReady: the Node says Ready (its kubelet posts status).
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
