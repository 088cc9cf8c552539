// Package podfacts reads what the API shows of a member pod: the
// StatefulSet that re-creates it, the template and image it comes back
// with, its start gate, its node's readiness. It reads; plan judges.
package podfacts

import (
	"context"
	"fmt"
	"slices"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TemplateUngated reads what plan.TemplateUngated judges: the pod's
// StatefulSet, revisions and start gates (the pod's, its template's). It
// reads no claim (gone after the steward's delete-PVC step); err: the
// StatefulSet could not be read.
func TemplateUngated(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod) (string, error) {
	sts, why, err := ControllingStatefulSet(ctx, kc, pod)
	if why != "" || err != nil {
		return why, err
	}
	t := plan.PodTemplate{StatefulSet: sts.Name, CurrentRevision: sts.Status.CurrentRevision, UpdateRevision: sts.Status.UpdateRevision,
		PodRevision: pod.Labels[appsv1.ControllerRevisionHashLabelKey]}
	g, err := membersource.GateOf(pod)
	t.PodGate, t.PodGateErr = PodGate(g), err
	g, err = membersource.GateOf(FromTemplate(pod, sts))
	t.TemplateGate, t.TemplateGateErr = PodGate(g), err
	return plan.TemplateUngated(t), nil
}

// ControllingStatefulSet is the apps/v1 StatefulSet that controls pod (the
// one its controller reference names, by name and UID), the only
// controller that re-creates a deleted pod under its name, claims and
// state dir. why says why there is none ("": sts is it;
// plan.NotAStatefulSetPod, plan.StatefulSetNotTheOwner). err: the
// StatefulSet could not be read.
func ControllingStatefulSet(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod) (sts *appsv1.StatefulSet, why string, err error) {
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

// FromTemplate is pod as sts's template would re-create it (same name,
// node and claims: the pod's volumes of sts's claim templates).
func FromTemplate(pod *corev1.Pod, sts *appsv1.StatefulSet) *corev1.Pod {
	next := pod.DeepCopy()
	next.Spec = *sts.Spec.Template.Spec.DeepCopy()
	next.Spec.NodeName = pod.Spec.NodeName
	for _, v := range pod.Spec.Volumes {
		claimed := slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(c corev1.PersistentVolumeClaim) bool { return c.Name == v.Name })
		if claimed && !slices.ContainsFunc(next.Spec.Volumes, func(x corev1.Volume) bool { return x.Name == v.Name }) {
			next.Spec.Volumes = append(next.Spec.Volumes, v)
		}
	}
	return next
}

// podGate is g as plan reads it.
func PodGate(g membersource.Gate) plan.PodGate {
	return plan.PodGate{Wrapped: g.Wrapped, StateDir: g.StateDir, MemberSource: g.MemberSource}
}
