package supervisor

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// writeStatus writes a running pod's status back to the API: phase, pod
// and host IP, container states and restart counts, and the conditions the
// StatefulSet controller and Services read (Initialized, ContainersReady,
// Ready).
func (k *kubelet) writeStatus(ctx context.Context, key string) error {
	k.mu.Lock()
	ap := k.running[key]
	terminating := ap != nil && ap.terminating
	k.mu.Unlock()
	if ap == nil || terminating {
		return nil
	}
	ns, name, err := splitKey(key)
	if err != nil {
		return err
	}
	snap := ap.runner.snapshot()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := k.cfg.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if pod.UID != ap.uid || pod.DeletionTimestamp != nil {
			return nil
		}
		st := podStatus(pod, snap, ap, k.cfg.NodeIP)
		if equality.Semantic.DeepEqual(st, pod.Status) {
			return nil
		}
		pod.Status = st
		_, err = k.cfg.Client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}

func splitKey(key string) (ns, name string, err error) {
	for i := range key {
		if key[i] == '/' {
			return key[:i], key[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("pod key %q is not namespace/name", key)
}

// podStatus derives the API status from the containers' states; condition
// transition times only move when a condition changes.
func podStatus(pod *corev1.Pod, snap PodState, ap *apiPod, hostIP string) corev1.PodStatus {
	old := pod.Status
	st := corev1.PodStatus{
		Phase: corev1.PodPending, HostIP: hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}},
		PodIP: ap.ip, PodIPs: []corev1.PodIP{{IP: ap.ip}}, QOSClass: old.QOSClass,
		StartTime: &metav1.Time{Time: ap.started.UTC().Truncate(time.Second)},
	}
	if old.StartTime != nil {
		st.StartTime = old.StartTime
	}
	initialized := true
	for _, c := range pod.Spec.InitContainers {
		cs := containerStatus(c, snap.Containers[c.Name])
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			initialized = false
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	ready, started := initialized, false
	for _, c := range pod.Spec.Containers {
		s := snap.Containers[c.Name]
		cs := containerStatus(c, s)
		cs.Ready = s.State == "running" && (c.ReadinessProbe == nil || s.Ready)
		ready = ready && cs.Ready
		// A container that ran and waits for its restart keeps the pod
		// Running (restartPolicy Always, the only one the lab kubelet runs).
		started = started || s.State == "running" || s.Restarts > 0 || s.State == "exited"
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	if initialized && started {
		st.Phase = corev1.PodRunning
	}
	cond := func(t corev1.PodConditionType, ok bool) {
		status := corev1.ConditionFalse
		if ok {
			status = corev1.ConditionTrue
		}
		c := corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()}
		for _, o := range old.Conditions {
			if o.Type == t && o.Status == status {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
		st.Conditions = append(st.Conditions, c)
	}
	cond(corev1.PodInitialized, initialized)
	cond(corev1.ContainersReady, ready)
	cond(corev1.PodReady, ready)
	// Conditions the kubelet does not own (PodScheduled, DisruptionTarget,
	// readiness gates) stay as their writers left them.
	for _, o := range old.Conditions {
		switch o.Type {
		case corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady:
		default:
			st.Conditions = append(st.Conditions, o)
		}
	}
	return st
}

// containerStatus is the API view of one container the lab runs as a
// process (its "container ID" is its PID).
func containerStatus(c corev1.Container, s ContainerState) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, RestartCount: int32(s.Restarts)}
	switch s.State {
	case "running":
		cs.ContainerID = fmt.Sprintf("lab://%d", s.PID)
		cs.Started = ptrTo(true)
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: s.StartedAt.Truncate(time.Second)}}
	case "exited":
		cs.Started = ptrTo(false)
		term := &corev1.ContainerStateTerminated{ExitCode: int32(s.ExitCode), Reason: "Error", Message: s.LastExit,
			StartedAt: metav1.Time{Time: s.StartedAt.Truncate(time.Second)}}
		if s.ExitCode == 0 {
			term.Reason = "Completed"
		}
		if s.Init && s.ExitCode == 0 {
			cs.State.Terminated = term // an init container that is done
			break
		}
		// Exited and waiting for its restart, as a kubelet shows it.
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: s.LastExit}
		cs.LastTerminationState.Terminated = term
	default:
		cs.Started = ptrTo(false)
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	return cs
}

func ptrTo[T any](v T) *T { return &v }
