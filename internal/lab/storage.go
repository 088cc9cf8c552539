package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LocalStorageClass is the management lab's class of node-local PVs: static
// PVs (no provisioner), bound when a pod is scheduled (the scheduler picks a
// node whose PV is free), kept when released.
const LocalStorageClass = "local"

// PVSize is the capacity of every lab PV and hosted etcd PVC.
const PVSize = "1Gi"

func (l *Lab) createLocalStorage(ctx context.Context, pvsPerNode int) error {
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: LocalStorageClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr(storagev1.VolumeBindingWaitForFirstConsumer),
		ReclaimPolicy:     ptr(corev1.PersistentVolumeReclaimRetain)}
	if _, err := kc.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return fmt.Errorf("create storage class: %w", err)
	}
	for _, n := range l.Workers() {
		for range pvsPerNode {
			if _, err := l.AddPV(ctx, n.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddPV creates the next local PV of a worker node: a folder under the
// node's disk and a PV with node affinity to that node, as a local-volume
// provisioner or an admin would.
func (l *Lab) AddPV(ctx context.Context, node string) (*corev1.PersistentVolume, error) {
	return l.addPV(ctx, node, nil, nil)
}

// addPV is AddPV with the folder filled by fill before the PV exists, and
// the PV pre-bound to claim (nil: any claim of the class).
func (l *Lab) addPV(ctx context.Context, node string, fill func(dir string) error, claim *corev1.ObjectReference) (*corev1.PersistentVolume, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return nil, err
	}
	if !n.Worker {
		return nil, fmt.Errorf("%s is not a worker node of a management lab", node)
	}
	kc, err := l.KubeClient()
	if err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s-pv-%d", n.Name, i)
		dir := filepath.Join(n.PVDir(), name)
		if _, err := os.Stat(dir); err == nil {
			continue // taken (its PV may be bound, released or deleted: its data stays)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if fill != nil {
			if err := fill(dir); err != nil {
				return nil, err
			}
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"etcd-agent.io/lab-node": n.Name}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(PVSize)},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              LocalStorageClass,
				VolumeMode:                    ptr(corev1.PersistentVolumeFilesystem),
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{n.Name}}},
				}}}},
				ClaimRef: claim,
			},
		}
		created, err := kc.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("create PV %s: %w", name, err)
		}
		l.log.Info("added local PV", zap.String("pv", name), zap.String("path", dir))
		return created, nil
	}
}
