package podfacts

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod member's learner runs what its StatefulSet re-creates it with: the
// template (update revision) unless a partition keeps its ordinal on the
// current revision (the reviewer's stalled Helm rollout: etcd-1 and etcd-2
// updated to 3.6, etcd-0 lost on 3.5; deleting it brings 3.6 back).
func TestAPodMembersLearnerImageIsWhatItsStatefulSetRecreates(t *testing.T) {
	etcd := func(image string) corev1.PodSpec {
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd", Image: image, Command: []string{"etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd"},
			Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}}}
	}
	sts := func(strategy appsv1.StatefulSetUpdateStrategy) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "etcd"},
			Spec:   appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: etcd("bitnami/etcd:3.6.4-debian-12-r0")}, UpdateStrategy: strategy},
			Status: appsv1.StatefulSetStatus{CurrentRevision: "etcd-old", UpdateRevision: "etcd-new", CurrentReplicas: 1}}
	}
	pod := func(name, rev string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: rev}}, Spec: etcd("bitnami/etcd:3.5.17-debian-12-r0")}
	}
	partition := func(p int32) appsv1.StatefulSetUpdateStrategy {
		return appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &p}}
	}
	for _, c := range []struct {
		name string
		sts  *appsv1.StatefulSet
		pod  *corev1.Pod
		want string
	}{
		{"rolling update, partition 0: the template", sts(partition(0)), pod("etcd-0", "etcd-old"), "bitnami/etcd:3.6.4-debian-12-r0"},
		{"OnDelete: the template", sts(appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}), pod("etcd-0", "etcd-old"), "bitnami/etcd:3.6.4-debian-12-r0"},
		{"below the partition, pod of the current revision: its own", sts(partition(2)), pod("etcd-1", "etcd-old"), "bitnami/etcd:3.5.17-debian-12-r0"},
		{"below the partition, pod of another revision: unknown", sts(partition(2)), pod("etcd-1", "etcd-older"), ""},
		{"at the partition: the template", sts(partition(2)), pod("etcd-2", "etcd-old"), "bitnami/etcd:3.6.4-debian-12-r0"},
		{"a name that is not the StatefulSet's: unknown", sts(partition(0)), pod("other-0", "etcd-old"), ""},
	} {
		if got := RecreatedImage(c.pod, c.sts); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
