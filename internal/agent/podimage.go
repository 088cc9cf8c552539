package agent

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/manifest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// podImageRecheck spaces the API reads behind a pod member's learner image
// (one pod, one StatefulSet): the decision asks at every poll.
const podImageRecheck = 10 * time.Second

// podLearnerImage is the etcd image a pod member runs once the agent has
// deleted its pod: what its StatefulSet re-creates it with, which mid-way
// through a rollout is not the image of the pod now (plan's version rule;
// a stalled Helm upgrade keeps a lost member on the old image while the
// template names the new one). "" when it cannot be told.
type podLearnerImage struct {
	kc      kubernetes.Interface
	ns, pod string
	mu      sync.Mutex
	at      time.Time
	image   string
}

func (p *podLearnerImage) get() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < podImageRecheck {
		return p.image
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.image, p.at = p.read(ctx), time.Now()
	return p.image
}

func (p *podLearnerImage) read(ctx context.Context) string {
	pod, err := p.kc.CoreV1().Pods(p.ns).Get(ctx, p.pod, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	sts, why, err := controllingStatefulSet(ctx, p.kc, pod)
	if why != "" || err != nil {
		return etcdImage(pod) // not re-created by a StatefulSet: as it is
	}
	return recreatedImage(pod, sts)
}

// recreatedImage follows the StatefulSet controller's choice of revision
// for a re-created pod (newVersionedStatefulSetPod): the update revision's
// template, unless a RollingUpdate partition keeps the ordinal on the
// current revision; then the pod's own image if it is of that revision.
func recreatedImage(pod *corev1.Pod, sts *appsv1.StatefulSet) string {
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
		return etcdImage(fromTemplate(pod, sts))
	}
	if pod.Labels[appsv1.ControllerRevisionHashLabelKey] == sts.Status.CurrentRevision {
		return etcdImage(pod)
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

// etcdImage is the image of pod's etcd container ("" when none is found).
func etcdImage(pod *corev1.Pod) string {
	_, c, _, err := manifest.MemberOfPod(pod, manifest.PodFields{Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID),
		NodeName: pod.Spec.NodeName, PodIP: pod.Status.PodIP, HostIP: pod.Status.HostIP})
	if err != nil {
		return ""
	}
	return c.Image
}
