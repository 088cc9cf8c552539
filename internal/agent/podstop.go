package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/podfacts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// stoppable: the pod runtime may stop this member by deleting its pod only
// if the pod that comes back is held by the gate too: the pod runs etcd
// through the gate on this member's state dir, its controller's template
// does as well (a changed template re-creates it from that), and its data
// dir does not move with the pod's UID (a CSI volume: not yet supported).
// A pod no StatefulSet controls (controllingStatefulSet) is refused
// (plan.ReasonNotGated, as the steward does), before any delete and any
// membership change.
//
// want, when set, is the member the loop (and its recovery) serves: a pod
// re-created on another claim meanwhile (a VolumeSnapshot restore to a new
// PVC) is not stopped, since the recovery would then quarantine and prepare
// a data dir the pod no longer mounts (seen: the learner prepared on the old
// PV never started, the new pod held by its gate, the attempt failed after
// the learner stall timeout with a membership change made for nothing).
// The refusal (plan.ReasonMemberDataMoved) comes before any delete and any
// membership change (the deleter's, after the hold: the runtime removes its
// hold again); the attempt ends on it at once, and once the recovery is
// closed the member is read again under its new claim. The deleter checks the same of
// the very pod it deletes (onClaim), so a pod swapped in after this check
// is not deleted either.
func (p *podMembers) stoppable(cur membersource.PodMember, stateDir string, want *membersource.PodMember) error {
	if err := gatedOn(cur, stateDir); err != nil {
		return err
	}
	if cur.DataDirPerPod {
		return errors.New("its data dir is a CSI volume mounted by pod UID: it moves when the pod is re-created, which the pod runtime does not follow yet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pod, err := p.kc.CoreV1().Pods(cur.Namespace).Get(ctx, cur.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the pod: %w", err)
	}
	if want != nil {
		if err := p.onClaim(ctx, pod, *want); err != nil {
			return err
		}
	}
	sts, why, err := podfacts.ControllingStatefulSet(ctx, p.kc, pod)
	if err != nil {
		return err
	}
	if why != "" {
		return plan.NotRecreatedGated(why)
	}
	nm, err := membersource.FromPod(podfacts.FromTemplate(pod, sts), p.vols, p.c.KubeletPodsDir)
	if err != nil {
		return fmt.Errorf("its StatefulSet %s's template: %w", sts.Name, err)
	}
	if err := gatedOn(nm, stateDir); err != nil {
		return fmt.Errorf("its StatefulSet %s's template would re-create it so that %w", sts.Name, err)
	}
	if want != nil {
		return plan.TemplateKeepsData(sts.Name, nm.Identity.DataDir, want.Identity.DataDir)
	}
	return nil
}

// onClaim: pod (read from the API) keeps its data where the member this
// loop serves (want) did, on a claim that is not being deleted (a claim
// deleted with its pod, as a restore does, would bring the successor up on
// a new one).
func (p *podMembers) onClaim(ctx context.Context, pod *corev1.Pod, want membersource.PodMember) error {
	now, err := membersource.FromPod(pod, p.vols, p.c.KubeletPodsDir)
	if err != nil {
		return fmt.Errorf("read the pod's member: %w", err)
	}
	if err := sameClaim(want, now); err != nil {
		return err
	}
	if want.PVC == "" {
		return nil // a host path: no claim to lose
	}
	pvc, err := p.kc.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, want.PVC, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the claim %s: %w", want.PVC, err)
	}
	return plan.ClaimKept(podData(want), string(pvc.UID), pvc.DeletionTimestamp != nil)
}

// sameClaim: the pod now (got, read from the API) keeps its data where the
// member this loop serves (want) did (plan.SameData).
func sameClaim(want, got membersource.PodMember) error {
	return plan.SameData(podData(want), podData(got))
}

// podData is where pm keeps its data, as plan reads it.
func podData(pm membersource.PodMember) plan.PodData {
	return plan.PodData{DataDir: pm.Identity.DataDir, PVC: pm.PVC, PVCUID: string(pm.PVCUID)}
}

// podDeleter deletes a member pod with its own grace period: the pod bound
// to this node, by the UID it has when read (never a successor elsewhere),
// and only if check (when set) passes for that very pod.
type podDeleter struct {
	kc             kubernetes.Interface
	ns, name, node string
	check          func(ctx context.Context, pod *corev1.Pod) error
}

func (d podDeleter) DeletePod(ctx context.Context) (types.UID, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pod, err := d.kc.CoreV1().Pods(d.ns).Get(ctx, d.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if pod.Spec.NodeName != d.node {
		return "", fmt.Errorf("pod %s/%s is bound to node %q, not this agent's %s: not ours to stop", d.ns, d.name, pod.Spec.NodeName, d.node)
	}
	if d.check != nil {
		if err := d.check(ctx, pod); err != nil {
			return "", fmt.Errorf("pod %s/%s (uid %s): %w", d.ns, d.name, pod.UID, err)
		}
	}
	uid := pod.UID
	return uid, d.kc.CoreV1().Pods(d.ns).Delete(ctx, d.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}

func (d podDeleter) PodGone(ctx context.Context, uid types.UID) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pod, err := d.kc.CoreV1().Pods(d.ns).Get(ctx, d.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return pod.UID != uid, nil
}
