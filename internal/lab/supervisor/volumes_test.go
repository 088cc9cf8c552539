package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A Secret volume's files are where a real kubelet writes them (the agent
// finds a TLS member's gate cert there): its keys, or its items at their
// paths.
func TestASecretVolumeIsWrittenWhereTheKubeletKeepsIt(t *testing.T) {
	kc := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "clusters-d", Name: "etcd-tls"},
		Data: map[string][]byte{"ca.crt": []byte("ca"), "client.key": []byte("key")}})
	k := &kubelet{cfg: KubeletConfig{Client: kc, PodsDir: t.TempDir()}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "clusters-d", Name: "etcd-0", UID: "uid-0"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "etcd-tls"}}},
		{Name: "key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "etcd-tls",
			Items: []corev1.KeyToPath{{Key: "client.key", Path: "pki/etcd.key"}}}}}}}}
	dirs, err := k.volumes(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(k.cfg.PodsDir, "uid-0", "volumes", "kubernetes.io~secret", "tls")
	if dirs["tls"] != want {
		t.Fatalf("volume tls at %s, want %s", dirs["tls"], want)
	}
	for path, data := range map[string]string{filepath.Join(want, "ca.crt"): "ca", filepath.Join(want, "client.key"): "key",
		filepath.Join(dirs["key"], "pki", "etcd.key"): "key"} {
		if b, err := os.ReadFile(path); err != nil || string(b) != data {
			t.Fatalf("%s: %q %v, want %q", path, b, err, data)
		}
	}
	if _, err := os.Stat(filepath.Join(dirs["key"], "ca.crt")); !os.IsNotExist(err) {
		t.Fatalf("a key not in items was written: %v", err)
	}
}
