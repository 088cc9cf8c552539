package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The learner's version is its manifest's image tag, read from the
// manifest the kubelet runs or, while the agent holds the member stopped,
// from the parked one; a pod member's is its pod's image.
func TestLearnerVersionIsTheManifestsImageTag(t *testing.T) {
	kubeadm, err := os.ReadFile("../manifest/testdata/kubeadm-etcd.yaml") // image registry.k8s.io/etcd:3.6.4-0
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := Config{StaticPodManifest: filepath.Join(dir, "manifests", "etcd.yaml"), StateDir: filepath.Join(dir, "state")}
	if v := c.learnerVersion(); v != "" {
		t.Fatalf("no manifest anywhere: %q, want unknown", v)
	}
	write := func(path, image string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(kubeadm), "registry.k8s.io/etcd:3.6.4-0", image, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(c.parkedManifest(), "registry.k8s.io/etcd:3.5.21-0")
	if v := c.learnerVersion(); v != "3.5.21" {
		t.Fatalf("parked manifest: %q, want 3.5.21", v)
	}
	write(c.StaticPodManifest, "registry.k8s.io/etcd:3.6.4-0")
	if v := c.learnerVersion(); v != "3.6.4" {
		t.Fatalf("manifest in place: %q, want 3.6.4 (the kubelet's, not the parked one)", v)
	}
	write(c.StaticPodManifest, "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0123")
	if v := c.learnerVersion(); v != "" {
		t.Fatalf("digest-only image: %q, want unknown", v)
	}
	pod := Config{podImage: func() string { return "docker.io/bitnami/etcd:3.5.17-debian-12-r0" }}
	if v := pod.learnerVersion(); v != "3.5.17" {
		t.Fatalf("pod member: %q, want 3.5.17", v)
	}
	write(c.StaticPodManifest, "registry.k8s.io/etcd:3.6.4-0")
	exec := c
	exec.MemberRuntime = "exec"
	if v := exec.learnerVersion(); v != "" {
		t.Fatalf("exec runtime beside a tagged manifest: %q, want unknown", v)
	}
}
