// Package labtest is the harness every test package that runs against the
// real lab shares: it finds the repo's bin/, builds the etcd-agent binary
// (the lab's node supervisor) fresh once per test binary, brings one lab up
// on first use, and stops it when the tests end, keeping its folder only
// when something failed.
package labtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/realetcd"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RepoRoot walks up from the working directory (a package dir under test)
// to the directory holding the module's go.mod.
func RepoRoot() (string, error) { return realetcd.RepoRoot() }

// CheckBinaries fails loudly (never skips) when a real binary is missing.
func CheckBinaries(binDir string, names ...string) error {
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(binDir, n)); err != nil {
			return fmt.Errorf("%s missing: run `make tools` first (these tests need the real binaries)", filepath.Join(binDir, n))
		}
	}
	return nil
}

// CheckFreeDisk fails when dir's file system has less than need bytes free:
// a lab's etcd cannot preallocate its WAL on a full disk, and what a test
// then reports (members that never serve) hides why.
func CheckFreeDisk(dir string, need uint64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("free disk of %s: %w", dir, err)
	}
	if free := st.Bavail * uint64(st.Bsize); free < need {
		return fmt.Errorf("only %d MiB free in %s; the lab tests need %d MiB (remove old etcd-agent-*-lab-* and etcd-agent-e2e-* folders there)",
			free>>20, dir, need>>20)
	}
	return nil
}

// Shared is one lab for a whole test binary, started on first use.
type Shared struct {
	name   string
	opts   lab.Options
	once   sync.Once
	mu     sync.Mutex
	lab    *lab.Lab
	err    error
	tmp    string
	failed bool
}

// NewShared describes the package's lab; name labels its folder and messages.
// Dir, BinDir and AgentBinary are filled in.
func NewShared(name string, opts lab.Options) *Shared { return &Shared{name: name, opts: opts} }

// Lab returns the shared lab, bringing it up on first use; a test that
// fails keeps the lab folder for inspection.
func (s *Shared) Lab(t testing.TB) *lab.Lab {
	t.Helper()
	s.once.Do(s.up)
	if s.err != nil {
		t.Fatalf("%s lab: %v", s.name, s.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			s.mu.Lock()
			s.failed = true
			s.mu.Unlock()
		}
	})
	return s.lab
}

func (s *Shared) up() {
	root, err := RepoRoot()
	if err != nil {
		s.err = err
		return
	}
	bin := filepath.Join(root, "bin")
	o := s.opts
	need := []string{"etcd"}
	if o.EtcdBinary != "" && !filepath.IsAbs(o.EtcdBinary) {
		// A name in bin/ (e.g. "etcd-3.5"): checked like bin/etcd, so a
		// missing one fails the tests, never runs them on another etcd.
		need = []string{o.EtcdBinary}
		o.EtcdBinary = filepath.Join(bin, o.EtcdBinary)
	}
	if !s.opts.NoAPIServer {
		need = append(need, "kube-apiserver")
	}
	if s.err = CheckBinaries(bin, need...); s.err != nil {
		return
	}
	if s.tmp, s.err = os.MkdirTemp("", s.name+"-lab-"); s.err != nil {
		return
	}
	if s.err = CheckFreeDisk(s.tmp, 2<<30); s.err != nil {
		return
	}
	if o.AgentBinary, s.err = BuildAgent(root, s.tmp); s.err != nil {
		return
	}
	o.Dir, o.BinDir = filepath.Join(s.tmp, "lab"), bin
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s.lab, s.err = lab.Up(ctx, o) // a partly started lab is still stopped by Main
}

// Main runs the tests, then stops the lab (if one was started), runs the
// package's own cleanups and exits; call it from TestMain.
func (s *Shared) Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	os.Exit(s.down(code))
}

// MainAll is Main for a package with several shared labs (e.g. one per
// etcd version): each is stopped, and its folder kept when it failed.
func MainAll(m *testing.M, labs ...*Shared) {
	code := m.Run()
	for _, s := range labs {
		code = s.down(code)
	}
	os.Exit(code)
}

// down stops the lab if one was started and removes its folder unless
// something failed; it returns code, or 1 when the lab would not stop.
func (s *Shared) down(code int) int {
	if s.lab != nil {
		if err := s.lab.Down(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "%s: lab down: %v\n", s.name, err)
			code = 1
		}
	}
	if s.tmp != "" {
		if code == 0 && !s.failed {
			os.RemoveAll(s.tmp)
		} else {
			fmt.Fprintf(os.Stderr, "%s: lab folder kept for inspection in %s\n", s.name, s.tmp)
		}
	}
	return code
}

// Dir is the folder holding the lab (for a test's own files, kept with it
// on failure); empty before the lab is up.
func (s *Shared) Dir() string { return s.tmp }

// Eventually polls cond every 100 ms until it returns nil, or fails the test
// after d with cond's last error.
func Eventually(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	var err error
	if wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true, func(context.Context) (bool, error) {
		err = cond()
		return err == nil, nil
	}) != nil {
		t.Fatalf("%s: not true after %s: %v", what, d, err)
	}
}

// RestConfig is an admin client config for the lab's API server, with a
// rate limit high enough that tests measure the server, not client-go's
// default 5 QPS.
func (s *Shared) RestConfig(t testing.TB) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Lab(t).Spec.APIServer.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg
}

// KubeClient is a clientset over RestConfig.
func (s *Shared) KubeClient(t testing.TB) kubernetes.Interface {
	t.Helper()
	kc, err := kubernetes.NewForConfig(s.RestConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return kc
}
