package membersource

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// atomicWriterVolume lays out dir as the kubelet's atomic writer writes a
// Secret or ConfigMap volume: ca.crt -> ..data/ca.crt, ..data -> ..<ts>.
func atomicWriterVolume(t *testing.T, dir, content string) {
	t.Helper()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "ca.crt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"..data": filepath.Base(ts), "ca.crt": "..data/ca.crt"} {
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
}

// A Secret's or ConfigMap's files are links through ..data inside the
// volume: they are read.
func TestANodeFileIsReadThroughTheAtomicWritersLinks(t *testing.T) {
	vol := t.TempDir()
	atomicWriterVolume(t, vol, "the CA")
	b, err := NodeFile{Root: vol, Rel: "ca.crt"}.ReadFile()
	if err != nil || string(b) != "the CA" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// A pod writes its own claim: a link it made out of the volume, absolute
// or relative, is not followed, nor is a FIFO read (it would hang).
func TestANodeFileIsNotReadOutsideItsVolume(t *testing.T) {
	root := t.TempDir()
	secret := filepath.Join(root, "other-pod", "secret")
	atomicWriterVolume(t, secret, "another pod's key")
	vol := filepath.Join(root, "pv")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{"abs": secret, "rel": "../other-pod/secret", "abs.key": filepath.Join(secret, "ca.crt")} {
		if err := os.Symlink(to, filepath.Join(vol, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(vol, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"abs/ca.crt", "rel/ca.crt", "abs.key", "../other-pod/secret/ca.crt", "fifo"} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			if b, err := (NodeFile{Root: vol, Rel: rel}).ReadFile(); err == nil {
				t.Errorf("%s: read %q from outside the volume", rel, b)
			}
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the read hangs", rel)
		}
	}
}

// A gate's files keep their volume's root: a subPath is inside the
// volume, a projected volume is where the kubelet writes it.
func TestFromPodKeepsEachGateFilesVolumeRoot(t *testing.T) {
	pod := tlsPod()
	c := &pod.Spec.Containers[0]
	c.Command[4] = "--cacert=/etc/etcd/ca/ca.crt"
	c.Command[5] = "--cert=/var/lib/etcd/certs/client.crt"
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "ca", MountPath: "/etc/etcd/ca"})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "ca", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}})
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == "data" {
			c.VolumeMounts[i].SubPath = "member"
		}
	}
	pm, err := FromPod(pod, tlsVols(), "/host/kubelet/pods")
	if err != nil {
		t.Fatal(err)
	}
	want := ClientTLS{CACert: NodeFile{"/host/kubelet/pods/uid-2/volumes/kubernetes.io~projected/ca", "ca.crt"},
		Cert: NodeFile{"/mnt/disks/pv3", "member/certs/client.crt"},
		Key:  NodeFile{"/host/kubelet/pods/uid-2/volumes/kubernetes.io~secret/tls", "client.key"}}
	if pm.ClientTLS != want {
		t.Fatalf("client TLS %+v, want %+v", pm.ClientTLS, want)
	}
}

// The pod's next incarnation has the same files under its new UID.
func TestSameFilesIgnoresThePodsUID(t *testing.T) {
	in := func(uid string) ClientTLS {
		d := "/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~secret/tls"
		return ClientTLS{CACert: NodeFile{d, "ca.crt"}, Cert: NodeFile{d, "client.crt"}, Key: NodeFile{d, "client.key"}}
	}
	if !SameFiles(in("uid-1"), "uid-1", in("uid-2"), "uid-2") {
		t.Fatal("a re-created pod's Secret is other files")
	}
	other := in("uid-2")
	other.CACert.Rel = "other-ca.crt"
	if SameFiles(in("uid-1"), "uid-1", other, "uid-2") {
		t.Fatal("another CA file is the same")
	}
}

// A subPath out of its volume is refused, not clamped to the volume.
func TestFromPodSaysASubPathLeavesItsVolume(t *testing.T) {
	for _, sub := range []string{"../etcd", "certs/../../etcd", "/etc/kubernetes/pki/etcd"} {
		pod := tlsPod()
		c := &pod.Spec.Containers[0]
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == "tls" {
				c.VolumeMounts[i].SubPath = sub
			}
		}
		if _, err := FromPod(pod, tlsVols(), ""); err == nil || !strings.Contains(err.Error(), "leaves its volume") {
			t.Errorf("subPath %s: err %v", sub, err)
		}
	}
}
