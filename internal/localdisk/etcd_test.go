package localdisk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Helpers that run the real etcd binary and prepare real data dirs.

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 15 * time.Second
	pollInterval = 20 * time.Millisecond
)

// etcdBinary locates ../../bin/etcd (relative to this package's dir, which is
// the working directory of `go test`).
func etcdBinary(t testing.TB) string {
	t.Helper()
	return binaryAt(t, "etcd")
}

// binaryAt locates ../../bin/<file>; a missing binary fails the test.
func binaryAt(t testing.TB, file string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "bin", file))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		t.Fatalf("real etcd binary not found at %s (%v): run `make tools`", p, err)
	}
	return p
}

// etcdBinaries are the etcd minors whose data dirs the classifications
// are proven on: the format read (WAL metadata, db consistent index, .snap
// CRC) is the same in 3.5 and 3.6, and 3.5 clusters are still common.
var etcdBinaries = []struct{ row, file, version string }{{"etcd3.6", "etcd", "3.6."}, {"etcd3.5", "etcd-3.5", "3.5."}}

// onEtcdBinaries runs f once per real etcd binary, a subtest each; a
// binary of another minor than its row fails.
func onEtcdBinaries(t *testing.T, f func(t *testing.T, bin string)) {
	for _, b := range etcdBinaries {
		t.Run(b.row, func(t *testing.T) {
			bin := binaryAt(t, b.file)
			out, err := exec.Command(bin, "--version").Output()
			if err != nil || !strings.Contains(string(out), "etcd Version: "+b.version) {
				t.Fatalf("%s --version: %q (%v), want etcd %s*", bin, out, err, b.version)
			}
			f(t, bin)
		})
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// identity is what the running member reported about itself over the API.
type identity struct {
	memberID, clusterID uint64
	appliedIndex        uint64
}

// etcdProcess is a running single-member etcd.
type etcdProcess struct {
	dataDir  string
	endpoint string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd.Wait returns
	stopOnce sync.Once
}

// startEtcd starts a single-member cluster whose data dir is dataDir and
// waits until it serves requests. The member is stopped at test cleanup if
// the test has not stopped it already.
func startEtcd(t testing.TB, dataDir, name string) *etcdProcess {
	t.Helper()
	return startEtcdWith(t, etcdBinary(t), dataDir, name)
}

// startEtcdWith is startEtcd with the etcd binary bin.
func startEtcdWith(t testing.TB, bin, dataDir, name string) *etcdProcess {
	t.Helper()
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	logPath := dataDir + ".log"
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	cmd := exec.Command(bin,
		"--name", name,
		"--data-dir", dataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", name+"="+peerURL,
		"--initial-cluster-state", "new",
		// A unique token makes every test cluster get its own cluster ID.
		"--initial-cluster-token", fmt.Sprintf("%s-%d", name, time.Now().UnixNano()),
		// Snapshot often so classification reads the WAL from a real .snap.
		"--snapshot-count", "25",
		"--log-level", "warn",
	)
	cmd.Env = withoutEtcdEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	p := &etcdProcess{dataDir: dataDir, endpoint: clientURL, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.stop(t) })

	if err := p.waitReady(); err != nil {
		p.stop(t)
		t.Fatalf("etcd did not become ready: %v\n%s", err, p.logTail())
	}
	return p
}

func (p *etcdProcess) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	cli := p.client()
	defer cli.Close()
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("etcd exited: %v", p.cmd.ProcessState)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, lastErr = cli.Status(ctx, p.endpoint)
		cancel()
		if lastErr == nil {
			return nil
		}
		time.Sleep(pollInterval)
	}
	return fmt.Errorf("not ready after %s: %v", startTimeout, lastErr)
}

func (p *etcdProcess) client() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{p.endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		// New only fails on bad config, never on an unreachable endpoint.
		panic(err)
	}
	return cli
}

// writeKeys puts n keys with values large enough that the "key" bucket
// spills over several bbolt pages.
func (p *etcdProcess) writeKeys(t testing.TB, n int) {
	t.Helper()
	cli := p.client()
	defer cli.Close()
	value := strings.Repeat("v", 100)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Put(ctx, fmt.Sprintf("/test/key-%04d", i), value)
		cancel()
		if err != nil {
			t.Fatalf("put key %d: %v", i, err)
		}
	}
}

// identity asks the running member who it is.
func (p *etcdProcess) identity(t testing.TB) identity {
	t.Helper()
	cli := p.client()
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("member list: %v", err)
	}
	if len(members.Members) != 1 {
		t.Fatalf("want 1 member, got %d", len(members.Members))
	}
	status, err := cli.Status(ctx, p.endpoint)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if status.Header.MemberId != members.Members[0].ID || status.Header.ClusterId != members.Header.ClusterId {
		t.Fatalf("status and member list disagree: status %+v, members %+v", status.Header, members)
	}
	return identity{
		memberID:     members.Members[0].ID,
		clusterID:    members.Header.ClusterId,
		appliedIndex: status.RaftAppliedIndex,
	}
}

// stop sends SIGTERM to the member's PID and waits (bounded) for it to exit,
// escalating to SIGKILL. Safe to call more than once.
func (p *etcdProcess) stop(t testing.TB) {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
			return
		case <-time.After(stopTimeout):
		}
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(stopTimeout):
		}
		t.Errorf("etcd pid %d did not exit within %s of SIGTERM\n%s", p.cmd.Process.Pid, stopTimeout, p.logTail())
	})
}

func (p *etcdProcess) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func withoutEtcdEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ETCD_") {
			out = append(out, kv)
		}
	}
	return out
}

// stoppedMember is a data dir written by a real etcd that was then stopped
// cleanly, plus what that etcd said about itself.
type stoppedMember struct {
	dataDir string
	id      identity
}

var (
	goldenMu   sync.Mutex
	goldens    = map[string]*stoppedMember{} // by etcd binary; nil: its build failed
	goldenRoot string
)

// makeStoppedMember starts etcd in a new dir under root, writes keys, records
// its identity and stops it.
func makeStoppedMember(t testing.TB, root, name string) stoppedMember {
	t.Helper()
	return makeStoppedMemberWith(t, etcdBinary(t), root, name)
}

// makeStoppedMemberWith is makeStoppedMember with the etcd binary bin.
func makeStoppedMemberWith(t testing.TB, bin, root, name string) stoppedMember {
	t.Helper()
	dataDir := filepath.Join(root, name)
	p := startEtcdWith(t, bin, dataDir, name)
	p.writeKeys(t, 100)
	id := p.identity(t)
	p.stop(t)
	return stoppedMember{dataDir: dataDir, id: id}
}

// goldenMember is built once per test binary (removed in TestMain); tests
// get copies of it via copyOfGolden so they can damage them freely.
func goldenMember(t testing.TB) stoppedMember {
	t.Helper()
	return goldenMemberOf(t, etcdBinary(t))
}

// goldenMemberOf is goldenMember written by the etcd binary bin.
func goldenMemberOf(t testing.TB, bin string) stoppedMember {
	t.Helper()
	goldenMu.Lock()
	defer goldenMu.Unlock()
	g, tried := goldens[bin]
	if !tried {
		goldens[bin] = nil // a build that fails below is not retried
		if goldenRoot == "" {
			root, err := os.MkdirTemp("", "localdisk-golden-")
			if err != nil {
				t.Fatal(err)
			}
			goldenRoot = root
		}
		m := makeStoppedMemberWith(t, bin, goldenRoot, fmt.Sprintf("golden%d", len(goldens)))
		g, goldens[bin] = &m, &m
	}
	if g == nil {
		t.Fatalf("golden data dir of %s could not be built; see the first test that failed", bin)
	}
	return *g
}

func TestMain(m *testing.M) {
	ServeInspectionIfChild()
	code := m.Run()
	if goldenRoot != "" {
		_ = os.RemoveAll(goldenRoot)
	}
	os.Exit(code)
}

// copyOfGolden returns a private copy of the golden data dir.
func copyOfGolden(t testing.TB) stoppedMember {
	t.Helper()
	return copyOfGoldenOf(t, etcdBinary(t))
}

// copyOfGoldenOf is copyOfGolden of the golden data dir bin wrote.
func copyOfGoldenOf(t testing.TB, bin string) stoppedMember {
	t.Helper()
	g := goldenMemberOf(t, bin)
	dst := filepath.Join(t.TempDir(), "data")
	if err := copyTree(g.dataDir, dst); err != nil {
		t.Fatalf("copy golden data dir: %v", err)
	}
	return stoppedMember{dataDir: dst, id: g.id}
}

// copyTree copies a directory tree, keeping modes and writing files
// sparsely: a stopped member's WAL segment is 64MB of mostly zeros.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(target, info.Mode().Perm())
		}
		return copyFileSparse(path, target, info)
	})
}

func copyFileSparse(src, dst string, info os.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm())
	if err != nil {
		return err
	}
	defer out.Close()
	buf := make([]byte, 64<<10)
	zero := make([]byte, len(buf))
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if bytes.Equal(buf[:n], zero[:n]) {
				if _, err := out.Seek(int64(n), io.SeekCurrent); err != nil {
					return err
				}
			} else if _, err := out.Write(buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	return out.Truncate(info.Size())
}
