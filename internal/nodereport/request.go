package nodereport

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
	// The answer is a last-recovery other than the one there before.
	var prev string
	if n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		prev = n.Annotations[AnnotationLastRecovery]
	}
	ann := map[string]any{AnnotationRecover: ActionRejoin, AnnotationRecoverDryRun: nil}
	if req.DryRun {
		ann[AnnotationRecoverDryRun] = "true"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return LastRecovery{}, fmt.Errorf("annotate node %s: %w", node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			_, pending := n.Annotations[AnnotationRecover]
			if lr, ok, _ := LastRecoveryFrom(n.Annotations); ok && !pending && n.Annotations[AnnotationLastRecovery] != prev {
				return lr, nil
			}
		}
		select {
		case <-ctx.Done():
			return LastRecovery{}, fmt.Errorf("no answer from the agent on %s within %s (is it running? the request stays on the Node): %w", node, timeout, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
