package mover

import (
	"context"
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SourceGone says whether a move-in's source (from: its move-from
// value) still asks for it: "" while the source's Node says move-to=self;
// otherwise why not. An ask left behind by a move that ended never adds a
// member (plan: checkMoveIn, and again before the add).
func SourceGone(kc kubernetes.Interface, self string) func(ctx context.Context, from string) (string, error) {
	return func(ctx context.Context, from string) (string, error) {
		src, _, err := nodereport.ParseMoveFrom(from)
		if err != nil {
			return err.Error(), nil
		}
		n, err := kc.CoreV1().Nodes().Get(ctx, src, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Sprintf("the move's source node %s is gone", src), nil
		}
		if err != nil {
			return "", fmt.Errorf("the move's source node %s: %w", src, err)
		}
		if to := n.Annotations[nodereport.AnnotationMoveTo]; to != self {
			return fmt.Sprintf("node %s no longer asks to move its member here (move-to=%q)", src, to), nil
		}
		return "", nil
	}
}
