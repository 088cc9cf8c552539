package agent

import (
	"context"
	"fmt"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// templateUngated reads what plan.TemplateUngated judges: the pod's
// StatefulSet, revisions and start gates (the pod's, its template's). It
// reads no claim (gone after the steward's delete-PVC step); err: the
// StatefulSet could not be read.
func templateUngated(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod) (string, error) {
	sts, why, err := controllingStatefulSet(ctx, kc, pod)
	if why != "" || err != nil {
		return why, err
	}
	t := plan.PodTemplate{StatefulSet: sts.Name, CurrentRevision: sts.Status.CurrentRevision, UpdateRevision: sts.Status.UpdateRevision,
		PodRevision: pod.Labels[appsv1.ControllerRevisionHashLabelKey]}
	g, err := membersource.GateOf(pod)
	t.PodGate, t.PodGateErr = podGate(g), err
	g, err = membersource.GateOf(fromTemplate(pod, sts))
	t.TemplateGate, t.TemplateGateErr = podGate(g), err
	return plan.TemplateUngated(t), nil
}

// controllingStatefulSet is the apps/v1 StatefulSet that controls pod (the
// one its controller reference names, by name and UID), the only
// controller that re-creates a deleted pod under its name, claims and
// state dir. why says why there is none ("": sts is it;
// plan.NotAStatefulSetPod, plan.StatefulSetNotTheOwner). err: the
// StatefulSet could not be read.
func controllingStatefulSet(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod) (sts *appsv1.StatefulSet, why string, err error) {
	var owner *plan.PodOwner
	if ref := metav1.GetControllerOf(pod); ref != nil {
		owner = &plan.PodOwner{Kind: ref.Kind, APIVersion: ref.APIVersion, Name: ref.Name, UID: string(ref.UID)}
	}
	if why := plan.NotAStatefulSetPod(owner); why != "" {
		return nil, why, nil
	}
	sts, err = kc.AppsV1().StatefulSets(pod.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, plan.StatefulSetNotTheOwner(*owner, false, ""), nil
	case err != nil:
		return nil, "", fmt.Errorf("read its StatefulSet %s: %w", owner.Name, err)
	}
	if why := plan.StatefulSetNotTheOwner(*owner, true, string(sts.UID)); why != "" {
		return nil, why, nil
	}
	return sts, "", nil
}
