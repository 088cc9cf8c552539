package nodereport

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// A StatefulSet member's move: etcd-agent.io/move-to=<node> on the member
// pod (its agent serves it with --member-source=pods).

// ActionMoveAway is a pod's move-to request as its agent's healer sees it.
const ActionMoveAway = "move-away"

// AnnotationMoveSeed, on the PV a pod move reserved on the target node,
// names the stored snapshot the member's learner is seeded from (MoveSeed,
// JSON).
const AnnotationMoveSeed = "etcd-agent.io/move-seed"

// ParsePodRequest reads a member pod's trigger annotations: move-to (a
// move, with the dry-run flag) or recover.
func ParsePodRequest(annotations map[string]string) (Request, bool, error) {
	target, ok := annotations[AnnotationMoveTo]
	if !ok {
		return ParseRequest(annotations)
	}
	req := Request{Action: ActionMoveAway, Target: target}
	if target == "" {
		return req, true, fmt.Errorf("annotation %s is empty: name the node to move the member to", AnnotationMoveTo)
	}
	switch dry, set := annotations[AnnotationRecoverDryRun]; {
	case !set || dry == "false":
	case dry == "true":
		req.DryRun = true
	default:
		return req, true, fmt.Errorf("annotation %s=%q is not understood: the accepted values are \"true\" and \"false\"", AnnotationRecoverDryRun, dry)
	}
	return req, true, nil
}

// MoveSeed is AnnotationMoveSeed's value: the move (its recovery on the
// source), the stored snapshot (key, size, sha256, cluster) and the member
// it was taken before removing.
type MoveSeed struct {
	Recovery  string `json:"recovery"`
	From      string `json:"from"` // "<namespace>/<pod>@<node>"
	Key       string `json:"key"`
	SHA256    string `json:"sha256"`
	Size      int64  `json:"size"`
	ClusterID string `json:"clusterID"` // hex
	Removed   string `json:"removed"`   // hex: the member removed after the snapshot
}

// Encode is the annotation's value.
func (s MoveSeed) Encode() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// ParseMoveSeed reads AnnotationMoveSeed; a value that is not complete is
// an error (the learner is then seeded as any other).
func ParseMoveSeed(v string) (MoveSeed, uint64, uint64, error) {
	var s MoveSeed
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, 0, 0, fmt.Errorf("annotation %s: %w", AnnotationMoveSeed, err)
	}
	cluster, err1 := strconv.ParseUint(s.ClusterID, 16, 64)
	removed, err2 := strconv.ParseUint(s.Removed, 16, 64)
	if err1 != nil || err2 != nil || cluster == 0 || removed == 0 || s.Key == "" || s.SHA256 == "" || s.Size <= 0 || s.Recovery == "" {
		return s, 0, 0, fmt.Errorf("annotation %s=%q is incomplete", AnnotationMoveSeed, v)
	}
	return s, cluster, removed, nil
}

// RequestPodMove sets move-to (and the dry-run flag) on member pod ns/name
// and waits for the move's answer: the source agent's refusal, dry run or
// failure on the pod, or the target agent's rejoin of the member there (a
// succeeded last-recovery on the pod, now on target, naming the move).
func RequestPodMove(ctx context.Context, kc kubernetes.Interface, ns, name, target string, dryRun bool, timeout time.Duration) (LastRecovery, error) {
	if ns == "" || name == "" || target == "" {
		return LastRecovery{}, fmt.Errorf("name the member pod (namespace/name) and the target node")
	}
	var prev string
	if p, err := kc.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		prev = p.Annotations[AnnotationLastRecovery]
	}
	ann := map[string]any{AnnotationMoveTo: target, AnnotationRecoverDryRun: nil}
	if dryRun {
		ann[AnnotationRecoverDryRun] = "true"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := kc.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return LastRecovery{}, fmt.Errorf("annotate pod %s/%s: %w", ns, name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lr LastRecovery
	err := awaitPod(ctx, kc, ns, name, func(p *corev1.Pod) bool {
		if p.Annotations[AnnotationLastRecovery] == prev {
			return false
		}
		var ok bool
		if lr, ok, _ = LastRecoveryFrom(p.Annotations); !ok {
			return false
		}
		source := strings.HasPrefix(lr.Request, ActionMoveAway)
		switch {
		case source && lr.Result != ResultSucceeded:
			return true // refused, dry run or failed
		case !source && p.Spec.NodeName == target && lr.Result == ResultSucceeded && strings.HasPrefix(lr.MoveFrom, ns+"/"+name+"@"):
			return true
		}
		return false
	})
	if err != nil {
		return LastRecovery{}, fmt.Errorf("the move of %s/%s to %s has not been answered within %s (the agents' logs and the pod's Events say where it is): %w", ns, name, target, timeout, err)
	}
	return lr, nil
}
