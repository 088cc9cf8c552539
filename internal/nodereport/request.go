package nodereport

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Request asks the agent on node for a recovery by annotating its Node,
// and waits (up to timeout) until the agent has cleared the request and
// written a new last-recovery. It is `etcd-agent recover`: the
// daemon does the work under the same rules as for the annotation.
func RequestRecovery(ctx context.Context, kc kubernetes.Interface, node string, req Request, timeout time.Duration) (LastRecovery, error) {
	if node == "" {
		return LastRecovery{}, fmt.Errorf("no node name: give --node-name or set NODE_NAME")
	}
	ann := map[string]any{AnnotationRecover: ActionRejoin, AnnotationRecoverDryRun: nil}
	if req.DryRun {
		ann[AnnotationRecoverDryRun] = "true"
	}
	return requestAndWait(ctx, kc, node, ann, AnnotationRecover, timeout)
}

// RequestMove asks the agent on node to move its member to target
// (AnnotationMoveTo) and waits, up to timeout, for its answer: the
// last-recovery written when the move ends (moved, failed or refused).
// It is `etcd-agent move`.
func RequestMove(ctx context.Context, kc kubernetes.Interface, node, target string, dryRun bool, timeout time.Duration) (LastRecovery, error) {
	if node == "" || target == "" {
		return LastRecovery{}, fmt.Errorf("name the member's node and the target node")
	}
	ann := map[string]any{AnnotationMoveTo: target, AnnotationRecoverDryRun: nil}
	if dryRun {
		ann[AnnotationRecoverDryRun] = "true"
	}
	return requestAndWait(ctx, kc, node, ann, AnnotationMoveTo, timeout)
}

// requestAndWait sets ann on node's Node and waits until the agent has
// cleared pending and written a new last-recovery.
func requestAndWait(ctx context.Context, kc kubernetes.Interface, node string, ann map[string]any, pending string, timeout time.Duration) (LastRecovery, error) {
	// The answer is a last-recovery other than the one there before.
	var prev string
	if n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		prev = n.Annotations[AnnotationLastRecovery]
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return LastRecovery{}, fmt.Errorf("annotate node %s: %w", node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lr LastRecovery
	err := awaitNode(ctx, kc, node, func(n *corev1.Node) bool {
		_, waiting := n.Annotations[pending]
		var ok bool
		lr, ok, _ = LastRecoveryFrom(n.Annotations)
		return ok && !waiting && n.Annotations[AnnotationLastRecovery] != prev
	})
	if err != nil {
		return LastRecovery{}, fmt.Errorf("no answer from the agent on %s within %s (is it running? the request stays on the Node): %w", node, timeout, err)
	}
	return lr, nil
}
