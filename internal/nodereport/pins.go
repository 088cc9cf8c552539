package nodereport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/pin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// AnnotationPins holds the JSON map member name -> pin.Pin: the cluster and
// member IDs the node's agent saw its members serve under. It outlives the
// node's disk, so a reinstalled node's gate and agent still know that the
// member existed.
const AnnotationPins = "etcd-agent.io/pins"

// ErrMalformedPins: the annotation is not what the agent writes.
var ErrMalformedPins = errors.New("malformed pins annotation")

// ReadPin returns member's pin from node's annotation; ok is false when the
// Node has none for it. A malformed annotation is an error.
func ReadPin(ctx context.Context, kc kubernetes.Interface, node, member string) (pin.Pin, bool, error) {
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return pin.Pin{}, false, err
	}
	pins, err := decodePins(n.Annotations[AnnotationPins])
	if err != nil {
		return pin.Pin{}, false, err
	}
	p, ok := pins[member]
	return p, ok, nil
}

// WritePin records p on node (read-modify-write, retried on conflict, so
// the pins of other members on the node survive).
func WritePin(ctx context.Context, kc kubernetes.Interface, node string, p pin.Pin) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pins, err := decodePins(n.Annotations[AnnotationPins])
		if err != nil {
			return err
		}
		v, err := pin.EncodeWith(pins, p)
		if err != nil {
			return err
		}
		// A merge patch that carries the resourceVersion read: it fails
		// with a conflict if the Node changed since (RBAC grants patch only).
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion,
			"annotations": map[string]string{AnnotationPins: v}}})
		if err != nil {
			return err
		}
		_, err = kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

func decodePins(s string) (map[string]pin.Pin, error) {
	pins, err := pin.DecodeMap(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformedPins, AnnotationPins, err)
	}
	return pins, nil
}

// ReadPins returns every pin on node's annotation, and whether it has one.
func ReadPins(ctx context.Context, kc kubernetes.Interface, node string) (map[string]pin.Pin, bool, error) {
	n, err := kc.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, false, err
	}
	pins, err := decodePins(n.Annotations[AnnotationPins])
	return pins, len(pins) > 0, err
}

// MemberPinnedAnywhere tells whether any Node's pins name member in the
// cluster clusterID: an agent saw it serve there on some node (a new node
// taking over a lost member's name finds it on the old node's record). A
// pin of another cluster (rebuilt, a Node name reused) does not count, nor
// does any pin while the cluster ID is unknown (0).
func MemberPinnedAnywhere(ctx context.Context, kc kubernetes.Interface, member string, clusterID uint64) (bool, error) {
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for _, n := range nodes.Items {
		pins, err := decodePins(n.Annotations[AnnotationPins])
		if err != nil {
			continue // another node's malformed record says nothing of ours
		}
		if p, ok := pins[member]; ok && clusterID != 0 && uint64(p.ClusterID) == clusterID {
			return true, nil
		}
	}
	return false, nil
}
