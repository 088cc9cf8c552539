package localdisk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-agent/etcd-agent/internal/lab/realetcd"
)

// Helpers that run the real etcd binary and prepare real data dirs.

// etcdBinary is bin/etcd (3.6).
func etcdBinary(t testing.TB) string {
	t.Helper()
	return realetcd.Binary(t, "etcd")
}

// onEtcdBinaries runs f once per real etcd minor (realetcd.Versions): the
// format read (WAL metadata, db consistent index, .snap CRC) is the same
// in 3.5 and 3.6, and 3.5 clusters are still common.
func onEtcdBinaries(t *testing.T, f func(t *testing.T, bin string)) {
	realetcd.OnVersions(t, func(t *testing.T, _ realetcd.Version, bin string) { f(t, bin) })
}

// identity is what the running member reported about itself over the API.
type identity struct {
	memberID, clusterID uint64
	appliedIndex        uint64
}

// etcdProcess is a running one-member etcd.
type etcdProcess struct{ *realetcd.Process }

// startEtcd starts a one-member cluster of bin/etcd on dataDir.
func startEtcd(t testing.TB, dataDir, name string) *etcdProcess {
	t.Helper()
	return startEtcdWith(t, etcdBinary(t), dataDir, name)
}

// startEtcdWith is startEtcd with the etcd binary bin.
func startEtcdWith(t testing.TB, bin, dataDir, name string) *etcdProcess {
	t.Helper()
	return &etcdProcess{realetcd.Start(t, bin, dataDir, name)}
}

func (p *etcdProcess) client() *clientv3.Client { return p.Client() }

func (p *etcdProcess) stop(t testing.TB) { p.Stop(t) }

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
	status, err := cli.Status(ctx, p.Endpoint)
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
