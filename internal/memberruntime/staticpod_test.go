package memberruntime

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/manifest"
	"go.uber.org/zap/zaptest"
)

// These tests exercise the file handling of the static-pod runtime without a
// kubelet: the client URL points at a closed port, so the "process" is gone
// as soon as the manifest is parked. lab_test.go covers the real thing.

const podTemplate = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
spec:
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.16-0
    command:
    - etcd
    - --name=cp-1
    - --data-dir=DATADIR
    - --initial-cluster=cp-1=http://127.0.0.1:2380
    - --initial-cluster-state=new
    volumeMounts:
    - mountPath: DATADIR
      name: etcd-data
  volumes:
  - hostPath:
      path: DATADIR
      type: DirectoryOrCreate
    name: etcd-data
`

type podFixture struct {
	manifestsDir, manifestPath, parkDir, dataDir, clientURL string
}

func newPodFixture(t *testing.T) podFixture {
	t.Helper()
	root := t.TempDir()
	f := podFixture{
		manifestsDir: filepath.Join(root, "manifests"),
		parkDir:      filepath.Join(root, "state", "parked"),
		dataDir:      filepath.Join(root, "disk", "etcd"),
		clientURL:    "http://" + closedAddr(t),
	}
	f.manifestPath = filepath.Join(f.manifestsDir, "etcd.yaml")
	for _, d := range []string{f.manifestsDir, filepath.Join(f.dataDir, "member", "snap")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pod := strings.ReplaceAll(podTemplate, "DATADIR", f.dataDir)
	if err := os.WriteFile(f.manifestPath, []byte(pod), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f podFixture) runtime(t *testing.T) Runtime {
	return NewStaticPod(f.manifestPath, f.parkDir, []string{f.clientURL}, zaptest.NewLogger(t))
}

// closedAddr returns a loopback address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func ctxWithTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s should not exist (stat err %v)", path, err)
	}
}

func mustStopped(t *testing.T, rt Runtime, want bool) {
	t.Helper()
	got, err := rt.Stopped()
	if err != nil || got != want {
		t.Fatalf("Stopped() = %v, %v; want %v, nil", got, err, want)
	}
}

// onlyManifest fails if the manifests dir holds anything but etcd.yaml: a
// stray file there could be run by the kubelet.
func onlyManifest(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "etcd.yaml" {
			t.Errorf("unexpected file %s left in the manifests dir", e.Name())
		}
	}
}

func TestStaticPodStopParksManifestAndStartPutsItBackWithRejoinFlags(t *testing.T) {
	f := newPodFixture(t)
	rt := f.runtime(t)
	mustStopped(t, rt, false)

	if err := rt.Stop(ctxWithTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, f.manifestPath)
	parked := filepath.Join(f.parkDir, "etcd.yaml")
	if _, err := os.Stat(parked); err != nil {
		t.Fatalf("manifest not parked: %v", err)
	}
	mustStopped(t, rt, true)
	if err := rt.Stop(ctxWithTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("second Stop: %v", err)
	}

	const ic = "cp-1=http://127.0.0.1:2380,cp-2=http://127.0.0.2:2380"
	if err := rt.Start(ctxWithTimeout(t, 10*time.Second), ic); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.LoadMember(f.manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if m.InitialCluster != ic || m.InitialClusterState != "existing" {
		t.Fatalf("manifest has initial-cluster %q state %q, want %q existing", m.InitialCluster, m.InitialClusterState, ic)
	}
	if m.Name != "cp-1" || m.DataDir != f.dataDir {
		t.Fatalf("identity changed: name %q data dir %q", m.Name, m.DataDir)
	}
	st, _ := os.Stat(f.manifestPath)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("manifest mode %v, want the original 0600", st.Mode().Perm())
	}
	mustNotExist(t, parked)
	mustStopped(t, rt, false)
	onlyManifest(t, f.manifestsDir)
}

func TestStaticPodStartRewritesALiveManifestOnlyWhenFlagsDiffer(t *testing.T) {
	f := newPodFixture(t)
	rt := f.runtime(t)
	const ic = "cp-1=http://127.0.0.1:2380"
	if err := rt.Start(ctxWithTimeout(t, 5*time.Second), ic); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.LoadMember(f.manifestPath)
	if err != nil || m.InitialClusterState != "existing" {
		t.Fatalf("live manifest not rewritten: state %q, err %v", m.InitialClusterState, err)
	}
	before := inode(t, f.manifestPath)
	if err := rt.Start(ctxWithTimeout(t, 5*time.Second), ic); err != nil {
		t.Fatal(err)
	}
	if inode(t, f.manifestPath) != before {
		t.Fatal("second Start replaced an up-to-date manifest (the kubelet would restart etcd for nothing)")
	}
	onlyManifest(t, f.manifestsDir)
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestStaticPodStartPrefersTheLiveManifestOverAStaleParkedCopy(t *testing.T) {
	f := newPodFixture(t)
	// As after a crash between copying and removing during a cross-device park.
	if err := os.MkdirAll(f.parkDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.parkDir, "etcd.yaml"), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := f.runtime(t)
	mustStopped(t, rt, false)
	if err := rt.Start(ctxWithTimeout(t, 5*time.Second), "cp-1=http://127.0.0.1:2380"); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, filepath.Join(f.parkDir, "etcd.yaml"))
	if _, err := manifest.LoadMember(f.manifestPath); err != nil {
		t.Fatal(err)
	}
}

func TestStaticPodWithoutAnyManifestRefusesToActOrGuess(t *testing.T) {
	f := newPodFixture(t)
	os.Remove(f.manifestPath)
	rt := f.runtime(t)
	if _, err := rt.Stopped(); err == nil {
		t.Error("Stopped() without any manifest: want an error")
	}
	if err := rt.Stop(ctxWithTimeout(t, 5*time.Second)); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("Stop: got %v, want 'neither at ... nor parked' error", err)
	}
	if err := rt.Start(ctxWithTimeout(t, 5*time.Second), "cp-1=http://127.0.0.1:2380"); err == nil {
		t.Error("Start without any manifest: want an error")
	}
	if err := rt.Start(ctxWithTimeout(t, 5*time.Second), " "); err == nil {
		t.Error("Start with an empty initial cluster: want an error")
	}
}

func TestStopWaitsWhileTheClientURLStillAcceptsConnections(t *testing.T) {
	f := newPodFixture(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f.clientURL = "http://" + l.Addr().String()
	rt := f.runtime(t)
	err = rt.Stop(ctxWithTimeout(t, 500*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "accepts connections") {
		t.Fatalf("Stop with a listener still open: got %v, want a deadline error saying it accepts connections", err)
	}
	l.Close()
	if err := rt.Stop(ctxWithTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Stop once the listener is gone: %v", err)
	}
}

func TestStopWaitsWhileTheDBLockIsHeld(t *testing.T) {
	f := newPodFixture(t)
	db, err := os.Create(filepath.Join(f.dataDir, "member", "snap", "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Exclusive, as the running member's bbolt holds it.
	if err := syscall.Flock(int(db.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	rt := f.runtime(t)
	err = rt.Stop(ctxWithTimeout(t, 500*time.Millisecond))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("Stop with the db locked: got %v, want a deadline error saying it is locked", err)
	}
	if err := syscall.Flock(int(db.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(ctxWithTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Stop once the lock is free: %v", err)
	}
}

func TestStaticPodParksAndRestoresAcrossFilesystems(t *testing.T) {
	f := newPodFixture(t)
	shm, err := os.MkdirTemp("/dev/shm", "memberruntime-park-")
	if err != nil {
		t.Fatalf("this test needs /dev/shm (a tmpfs) to put the park dir on another filesystem: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	if device(t, shm) == device(t, f.manifestsDir) {
		t.Fatalf("this test needs /dev/shm on another filesystem than %s", f.manifestsDir)
	}
	f.parkDir = filepath.Join(shm, "parked")
	rt := f.runtime(t)

	if err := rt.Stop(ctxWithTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, f.manifestPath)
	mustStopped(t, rt, true)
	const ic = "cp-1=http://127.0.0.1:2380"
	if err := rt.Start(ctxWithTimeout(t, 10*time.Second), ic); err != nil {
		t.Fatal(err)
	}
	if m, err := manifest.LoadMember(f.manifestPath); err != nil || m.InitialCluster != ic {
		t.Fatalf("restored manifest: initial-cluster %q, err %v", m.InitialCluster, err)
	}
	onlyManifest(t, f.manifestsDir)
	for _, dir := range []string{f.parkDir, filepath.Dir(f.manifestsDir)} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".tmp") {
				t.Errorf("temp file %s left in %s", e.Name(), dir)
			}
		}
	}
}

func device(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(st.Sys().(*syscall.Stat_t).Dev)
}

func TestStaticPodRetireSetsOnlyAStoppedMembersManifestAside(t *testing.T) {
	f := newPodFixture(t)
	rt := f.runtime(t).(Retirer)
	moved := filepath.Join(t.TempDir(), "moved")
	if _, err := rt.Retire(moved, "r1"); err == nil || !strings.Contains(err.Error(), "is live") {
		t.Fatalf("Retire of a running member: %v, want a refusal", err)
	}
	if _, err := os.Stat(f.manifestPath); err != nil {
		t.Fatalf("the refused Retire touched the manifest: %v", err)
	}
	if err := f.runtime(t).Stop(ctxWithTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	dst, err := rt.Retire(moved, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if dst != filepath.Join(moved, "etcd.yaml.r1") {
		t.Fatalf("retired to %s", dst)
	}
	if _, err := os.Stat(dst); err != nil {
		t.Fatal(err)
	}
	mustNotExist(t, f.manifestPath)
	mustNotExist(t, filepath.Join(f.parkDir, "etcd.yaml"))
	if _, err := f.runtime(t).Stopped(); err == nil {
		t.Fatal("after Retire the runtime still finds a manifest")
	}
	if _, err := rt.Retire(moved, "r2"); err == nil {
		t.Fatal("a second Retire found something to set aside")
	}
}
