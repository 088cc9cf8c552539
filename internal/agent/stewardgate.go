package agent

import (
	"context"
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// templateUngated says why the stuck pod might come back on a live node
// without the start gate holding etcd there ("" when it comes back gated):
// the steward frees its place only for a pod its own StatefulSet re-creates
// through the gate, for pods, on a node-local state dir (the new node's
// agent checks the path). It reads no claim (gone after the steward's
// delete-PVC step); err: the StatefulSet could not be read.
func templateUngated(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod) (string, error) {
	sts, why, err := controllingStatefulSet(ctx, kc, pod)
	if why != "" || err != nil {
		return why, err
	}
	// A rollout re-creates a pod from the current or the update revision
	// (a partition): the pod itself shows the current one, the template
	// the update one; both must be gated, and the pod must be of one of
	// them.
	if cur, upd := sts.Status.CurrentRevision, sts.Status.UpdateRevision; cur != upd {
		if h := pod.Labels[appsv1.ControllerRevisionHashLabelKey]; h != cur && h != upd {
			return fmt.Sprintf("StatefulSet %s is rolling out (%s to %s) and the pod is of revision %q", sts.Name, cur, upd, h), nil
		}
	}
	for _, c := range []struct {
		what string
		pod  *corev1.Pod
	}{{"the pod", pod}, {"its StatefulSet " + sts.Name + "'s template", fromTemplate(pod, sts)}} {
		g, err := membersource.GateOf(c.pod)
		if err == nil {
			err = gateReads(g, "")
		}
		if err != nil {
			return fmt.Sprintf("%s: %v", c.what, err), nil
		}
	}
	return "", nil
}

// controllingStatefulSet is the apps/v1 StatefulSet that controls pod (the
// one its controller reference names, by name and UID), the only
// controller that re-creates a deleted pod under its name, claims and
// state dir. why says why there is none ("": sts is it): no controller, a
// controller of another kind, a StatefulSet gone, or one of that name that
// is not the pod's (re-created after an orphaning delete). err: the
// StatefulSet could not be read.
func controllingStatefulSet(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod) (sts *appsv1.StatefulSet, why string, err error) {
	owner := metav1.GetControllerOf(pod)
	switch {
	case owner == nil:
		return nil, "no controller re-creates the pod: freeing its place would only shrink the cluster", nil
	case owner.Kind != "StatefulSet" || owner.APIVersion != appsv1.SchemeGroupVersion.String():
		return nil, fmt.Sprintf("it is re-created by %s %s (%s), whose template the agent does not read", owner.Kind, owner.Name, owner.APIVersion), nil
	}
	sts, err = kc.AppsV1().StatefulSets(pod.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Sprintf("its StatefulSet %s is gone: a new one would re-create it from a template not read", owner.Name), nil
	case err != nil:
		return nil, "", fmt.Errorf("read its StatefulSet %s: %w", owner.Name, err)
	case sts.UID != owner.UID:
		return nil, fmt.Sprintf("StatefulSet %s (%s) is not the pod's controller (%s)", sts.Name, sts.UID, owner.UID), nil
	}
	return sts, "", nil
}
