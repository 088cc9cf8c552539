package podfacts

import (
	"strconv"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/manifest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// RecreatedImage follows the StatefulSet controller's choice of revision
// for a re-created pod (newVersionedStatefulSetPod): the update revision's
// template, unless a RollingUpdate partition keeps the ordinal on the
// current revision; then the pod's own image if it is of that revision.
func RecreatedImage(pod *corev1.Pod, sts *appsv1.StatefulSet) string {
	ordinal, ok := podOrdinal(pod.Name, sts.Name)
	if !ok {
		return ""
	}
	start := 0
	if sts.Spec.Ordinals != nil {
		start = int(sts.Spec.Ordinals.Start)
	}
	current := false
	if u := sts.Spec.UpdateStrategy; u.Type == appsv1.RollingUpdateStatefulSetStrategyType || u.Type == "" {
		if u.RollingUpdate == nil || u.RollingUpdate.Partition == nil {
			current = ordinal < start+int(sts.Status.CurrentReplicas) && sts.Status.CurrentRevision != sts.Status.UpdateRevision
		} else {
			current = ordinal < start+int(*u.RollingUpdate.Partition)
		}
	}
	if !current {
		return EtcdImage(FromTemplate(pod, sts))
	}
	if pod.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.CurrentRevision {
		return EtcdImage(pod)
	}
	return "" // the current revision's template is in a ControllerRevision not read
}

// podOrdinal is the ordinal of a StatefulSet's pod name ("etcd-2": 2).
func podOrdinal(pod, sts string) (int, bool) {
	s, ok := strings.CutPrefix(pod, sts+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

// EtcdImage is the image of pod's etcd container ("" when none is found).
func EtcdImage(pod *corev1.Pod) string {
	_, c, _, err := manifest.MemberOfPod(pod, manifest.PodFields{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID),
		NodeName: pod.Spec.NodeName, PodIP: pod.Status.PodIP, HostIP: pod.Status.HostIP})
	if err != nil {
		return ""
	}
	return c.Image
}
