package lab

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// fakeEtcd writes an executable at dir/name that prints what `etcd
// --version` prints for version v.
func fakeEtcd(t *testing.T, dir, name, v string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	script := "#!/bin/sh\nprintf 'etcd Version: " + v + "\\nGit SHA: Not provided\\nGo Version: go1.26.8\\nGo OS/Arch: linux/amd64\\n'\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseEtcdVersion(t *testing.T) {
	for out, want := range map[string]string{
		"etcd Version: 3.5.36\nGit SHA: Not provided\nGo Version: go1.26.8\n": "3.5.36",
		"etcd Version: 3.6.16\n":                   "3.6.16",
		"etcd Version: v3.7.0-alpha.0\nGit SHA: x": "3.7.0-alpha.0",
	} {
		got, err := parseEtcdVersion(out)
		if err != nil || got != want {
			t.Errorf("parseEtcdVersion(%q) = %q, %v; want %q", out, got, err, want)
		}
	}
	for _, bad := range []string{"", "etcdctl version: 3.6.16\n", "etcd Version: \n", "Usage: etcd [flags]"} {
		if v, err := parseEtcdVersion(bad); err == nil {
			t.Errorf("parseEtcdVersion(%q) = %q, want an error", bad, v)
		}
	}
}

// The image tag is kubeadm's form of the version the binary reports, asked
// once per binary.
func TestEtcdImageOfTellsTheBinarysVersion(t *testing.T) {
	dir := t.TempDir()
	b := fakeEtcd(t, dir, "etcd-3.5", "3.5.36")
	img, err := EtcdImageOf(b)
	if err != nil || img != "registry.k8s.io/etcd:3.5.36-0" {
		t.Fatalf("EtcdImageOf = %q, %v", img, err)
	}
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	if img, err := EtcdImageOf(b); err != nil || img != "registry.k8s.io/etcd:3.5.36-0" {
		t.Fatalf("cached EtcdImageOf = %q, %v", img, err)
	}
	if _, err := EtcdImageOf(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("no error for a missing binary")
	}
}

func TestEtcdBinaryForVersion(t *testing.T) {
	for v, want := range map[string]string{"3.5": "/b/etcd-3.5", "3.6": "/b/etcd", "v3.7": "/b/etcd-3.7"} {
		if got, err := EtcdBinaryForVersion("/b", v); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", v, got, err, want)
		}
	}
	if _, err := EtcdBinaryForVersion("/b", "3.4"); err == nil {
		t.Error("3.4 accepted")
	}
}

// A node's own etcd wins over the lab's, and the manifest's image names
// the version of the binary it runs.
func TestEtcdPodManifestRunsTheNodesEtcdAndSaysItsVersion(t *testing.T) {
	dir := t.TempDir()
	fakeEtcd(t, dir, "etcd", "3.6.16")
	b35 := fakeEtcd(t, dir, "etcd-3.5", "3.5.36")
	spec := &Spec{BinDir: dir}
	n := Node{Name: "node1", Member: "node1", IP: "127.0.0.11", DataDir: "/d", ClientURL: "http://127.0.0.11:1", PeerURL: "http://127.0.0.11:2"}
	for bin, want := range map[string]struct{ cmd, image string }{
		"":  {filepath.Join(dir, "etcd"), "registry.k8s.io/etcd:3.6.16-0"},
		b35: {b35, "registry.k8s.io/etcd:3.5.36-0"},
	} {
		n.EtcdBinary = bin
		m, err := etcdPodManifest(spec, n, "node1=http://127.0.0.11:2", "new", "tok", []string{"/agent", "gate"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := etcdContainer(t, m)
		if c.Image != want.image || c.Command[slices.Index(c.Command, "--")+1] != want.cmd {
			t.Errorf("node binary %q: image %s, command %v; want %s running %s", bin, c.Image, c.Command, want.image, want.cmd)
		}
	}
}

func etcdContainer(t *testing.T, manifest []byte) corev1.Container {
	t.Helper()
	var pod corev1.Pod
	if err := yaml.Unmarshal(manifest, &pod); err != nil {
		t.Fatal(err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "etcd" {
			return c
		}
	}
	t.Fatalf("no etcd container in %s", manifest)
	return corev1.Container{}
}

// SetMemberVersion's rewrite changes etcd's binary (after the start gate's
// "--" when there is one) and the image, and nothing else.
func TestRewriteEtcdBinary(t *testing.T) {
	dir := t.TempDir()
	fakeEtcd(t, dir, "etcd-3.5", "3.5.36")
	spec := &Spec{BinDir: dir, EtcdBinary: filepath.Join(dir, "etcd-3.5")}
	n := Node{Name: "node1", Member: "node1", IP: "127.0.0.11", DataDir: "/d", ClientURL: "http://127.0.0.11:1", PeerURL: "http://127.0.0.11:2"}
	for _, gate := range [][]string{nil, {"/agent", "gate", "--state-dir=/s"}} {
		m, err := etcdPodManifest(spec, n, "node1=http://127.0.0.11:2", "new", "tok", gate, nil)
		if err != nil {
			t.Fatal(err)
		}
		before := etcdContainer(t, m)
		out, err := rewriteEtcdBinary(m, "/bin/etcd", "registry.k8s.io/etcd:3.6.16-0")
		if err != nil {
			t.Fatal(err)
		}
		after := etcdContainer(t, out)
		at := len(gate)
		if gate != nil {
			at++ // past "--"
		}
		if after.Image != "registry.k8s.io/etcd:3.6.16-0" || after.Command[at] != "/bin/etcd" {
			t.Fatalf("gate %v: image %s, command %v", gate, after.Image, after.Command)
		}
		after.Command[at], after.Image = before.Command[at], before.Image
		if !slices.Equal(after.Command, before.Command) {
			t.Fatalf("gate %v: command changed beyond the binary:\n%v\n%v", gate, before.Command, after.Command)
		}
	}
	if _, err := rewriteEtcdBinary([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: other\n    command: [x]\n"), "/bin/etcd", "i"); err == nil {
		t.Fatal("no error for a pod without an etcd container")
	}
	if _, err := rewriteEtcdBinary([]byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: etcd\n    command: [/agent, gate, --]\n"), "/bin/etcd", "i"); err == nil {
		t.Fatal("no error for a gate without etcd after --")
	}
}

func TestParseClusterVersion(t *testing.T) {
	v, err := parseClusterVersion([]byte(`{"etcdserver":"3.6.16","etcdcluster":"3.5.0"}`))
	if err != nil || v != "3.5.0" {
		t.Fatalf("%q, %v", v, err)
	}
	for _, bad := range []string{`{"etcdserver":"3.6.16"}`, `not json`} {
		if v, err := parseClusterVersion([]byte(bad)); err == nil {
			t.Errorf("%s: %q, want an error", bad, v)
		}
	}
}
