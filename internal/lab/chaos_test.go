package lab_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// The chaos faults (issue 12) against real 3-member labs: no API server, no
// agents. Each test brings up its own lab.

var (
	agentOnce sync.Once
	agentBin  string
	agentErr  error
	agentTmp  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if agentTmp != "" {
		os.RemoveAll(agentTmp)
	}
	os.Exit(code)
}

// upLab brings up a 3-member etcd lab with o's options; it is downed when
// the test ends (its folder kept if the test failed).
func upLab(t *testing.T, o lab.Options) *lab.Lab {
	t.Helper()
	root, err := labtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	if err := labtest.CheckBinaries(bin, "etcd"); err != nil {
		t.Fatal(err)
	}
	agentOnce.Do(func() {
		if agentTmp, agentErr = os.MkdirTemp("", "lab-chaos-agent-"); agentErr == nil {
			agentBin, agentErr = labtest.BuildAgent(root, agentTmp)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	dir, err := os.MkdirTemp("", "lab-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	o.Dir, o.BinDir, o.AgentBinary, o.Nodes, o.NoAPIServer = filepath.Join(dir, "lab"), bin, agentBin, 3, true
	o.Log = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	l, err := lab.Up(ctx, o)
	t.Logf("lab up in %s", time.Since(start).Round(time.Millisecond))
	if l != nil {
		t.Cleanup(func() {
			start := time.Now()
			if err := l.Down(context.Background()); err != nil {
				t.Errorf("lab down: %v", err)
			}
			t.Logf("lab down in %s", time.Since(start).Round(time.Millisecond))
			if t.Failed() {
				t.Logf("lab folder kept for inspection in %s", dir)
			} else {
				os.RemoveAll(dir)
			}
		})
	}
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	return l
}

// roles returns the leader's node and the followers' nodes.
func roles(t *testing.T, l *lab.Lab) (leader lab.MemberStatus, followers []lab.MemberStatus) {
	t.Helper()
	st := l.Status(context.Background())
	for _, m := range st.Members {
		if m.Leader {
			leader = m
		} else {
			followers = append(followers, m)
		}
	}
	if leader.Node == "" || len(followers) != 2 {
		t.Fatalf("want a leader and 2 followers on lab nodes: %s", st.Summary())
	}
	return leader, followers
}

func client(t *testing.T, l *lab.Lab, nodes ...string) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, name := range nodes {
		n, err := l.Spec.Node(name)
		if err != nil {
			t.Fatal(err)
		}
		eps = append(eps, n.ClientURL)
	}
	c, err := l.EtcdClientFor(eps...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func others(l *lab.Lab, node string) []string {
	var out []string
	for _, n := range l.Spec.Nodes {
		if n.Name != node && n.Member != "" {
			out = append(out, n.Name)
		}
	}
	return out
}

func put(cli *clientv3.Client, k, v string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := cli.Put(ctx, k, v)
	return err
}

// serializableValue reads k from the member cli talks to, without asking the leader.
func serializableValue(cli *clientv3.Client, k string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, k, clientv3.WithSerializable())
	if err != nil {
		return "", err
	}
	if len(r.Kvs) == 0 {
		return "", fmt.Errorf("%s not there (revision %d)", k, r.Header.Revision)
	}
	return string(r.Kvs[0].Value), nil
}

// etcdLogLines are the lines of node's etcd log that contain any of words.
func etcdLogLines(t *testing.T, l *lab.Lab, node string, words ...string) []string {
	t.Helper()
	n, err := l.Spec.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(n.LogsDir, "etcd-"+node+"_etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) }) {
			out = append(out, line)
		}
	}
	return out
}

func TestPartition(t *testing.T) {
	l := upLab(t, lab.Options{PeerProxy: true})
	if err := l.WaitHealthy(context.Background(), 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	t.Run("follower", func(t *testing.T) {
		_, followers := roles(t, l)
		f := followers[0].Node
		if err := l.Partition(f); err != nil {
			t.Fatal(err)
		}
		if got := l.Partitioned(); !slices.Equal(got, []string{f}) {
			t.Fatalf("Partitioned() = %v, want [%s]", got, f)
		}
		rest := client(t, l, others(l, f)...)
		labtest.Eventually(t, 10*time.Second, "the other two keep quorum", func() error {
			return put(rest, "partition/follower/quorum", "yes")
		})
		cut := client(t, l, f)
		start := time.Now()
		labtest.Eventually(t, 20*time.Second, "the partitioned member serves no linearizable read", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := cut.Get(ctx, "partition/probe"); err == nil {
				return fmt.Errorf("linearizable Get through %s succeeded", f)
			}
			return nil
		})
		t.Logf("%s refuses linearizable reads %s after the partition", f, time.Since(start).Round(time.Millisecond))
		if err := put(rest, "partition/follower/during", "written-while-cut"); err != nil {
			t.Fatalf("write during the partition: %v", err)
		}
		if v, err := serializableValue(cut, "partition/follower/during"); err == nil {
			t.Fatalf("the partitioned member has a key written during the partition: %q", v)
		}
		if err := l.HealPartition(f); err != nil {
			t.Fatal(err)
		}
		if got := l.Partitioned(); len(got) != 0 {
			t.Fatalf("Partitioned() after heal = %v", got)
		}
		labtest.Eventually(t, 30*time.Second, f+" catches up after the heal", func() error {
			v, err := serializableValue(cut, "partition/follower/during")
			if err == nil && v != "written-while-cut" {
				return fmt.Errorf("value %q", v)
			}
			return err
		})
		if err := l.WaitHealthy(context.Background(), 3, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	})

	// The proxy listens only while its member does: a stopped member's
	// advertised peer URL refuses connections, as without a proxy.
	t.Run("proxy follows its member", func(t *testing.T) {
		_, followers := roles(t, l)
		f := followers[0].Node
		n, err := l.Spec.Node(f)
		if err != nil {
			t.Fatal(err)
		}
		addr := strings.TrimPrefix(n.PeerURL, "http://")
		dial := func() error {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}
		if err := l.StopMember(f); err != nil {
			t.Fatal(err)
		}
		labtest.Eventually(t, 10*time.Second, f+"'s advertised peer URL refuses connections", func() error {
			if err := dial(); !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("dial %s: %v", addr, err)
			}
			return nil
		})
		if err := l.StartMember(f); err != nil {
			t.Fatal(err)
		}
		labtest.Eventually(t, 30*time.Second, f+"'s advertised peer URL accepts connections", dial)
		if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("leader", func(t *testing.T) {
		old, _ := roles(t, l)
		if err := l.Partition(old.Node); err != nil {
			t.Fatal(err)
		}
		rest := others(l, old.Node)
		start := time.Now()
		labtest.Eventually(t, 30*time.Second, "a new leader among the others", func() error {
			for _, n := range rest {
				c := client(t, l, n)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				s, err := c.Status(ctx, c.Endpoints()[0])
				cancel()
				c.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", n, err)
				}
				if s.Leader == 0 || fmt.Sprintf("%x", s.Leader) == old.ID {
					return fmt.Errorf("%s sees leader %x (old leader %s)", n, s.Leader, old.ID)
				}
			}
			return nil
		})
		t.Logf("new leader elected %s after partitioning leader %s", time.Since(start).Round(time.Millisecond), old.Node)
		labtest.Eventually(t, 10*time.Second, "the others accept writes", func() error {
			return put(client(t, l, rest...), "partition/leader/during", "yes")
		})
		if err := l.HealPartition(old.Node); err != nil {
			t.Fatal(err)
		}
		if err := l.WaitHealthy(context.Background(), 3, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		labtest.Eventually(t, 30*time.Second, old.Node+" catches up after the heal", func() error {
			_, err := serializableValue(client(t, l, old.Node), "partition/leader/during")
			return err
		})
	})

	t.Run("moved member", func(t *testing.T) { movedPartition(t, l) })
}

// movedPartition: a member moved to another node (MoveMember, its data
// copied along as if the disk moved) keeps its advertised proxy URL and can
// be partitioned on its new node.
func movedPartition(t *testing.T, l *lab.Lab) {
	_, followers := roles(t, l)
	f := followers[0].Node
	src, err := l.Spec.Node(f)
	if err != nil {
		t.Fatal(err)
	}
	peerURL, dataDir := src.PeerURL, src.DataDir
	if err := l.LoseNode(f, false); err != nil {
		t.Fatal(err)
	}
	dst, err := l.AddNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	to := dst.Name
	if out, err := exec.Command("cp", "-a", dataDir, filepath.Join(dst.DiskDir, "etcd")).CombinedOutput(); err != nil {
		t.Fatalf("copy the data dir: %v: %s", err, out)
	}
	if err := l.MoveMember(f, to); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.Spec.Node(to); n.PeerURL != peerURL {
		t.Fatalf("moved member advertises %s, want %s", n.PeerURL, peerURL)
	}
	if err := l.Partition(to); err != nil {
		t.Fatal(err)
	}
	rest := client(t, l, others(l, to)...)
	labtest.Eventually(t, 10*time.Second, "the other two keep quorum", func() error {
		return put(rest, "partition/moved/during", "yes")
	})
	moved := client(t, l, to)
	labtest.Eventually(t, 20*time.Second, "the partitioned moved member serves no linearizable read", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := moved.Get(ctx, "partition/probe"); err == nil {
			return fmt.Errorf("linearizable Get through %s succeeded", to)
		}
		return nil
	})
	if err := l.HealPartition(to); err != nil {
		t.Fatal(err)
	}
	labtest.Eventually(t, 30*time.Second, to+" catches up after the heal", func() error {
		_, err := serializableValue(moved, "partition/moved/during")
		return err
	})
}

func TestPartitionNeedsLiveProxies(t *testing.T) {
	l := &lab.Lab{Spec: &lab.Spec{PeerProxy: true, Nodes: []lab.Node{{Name: "node1"}}}}
	if err := l.Partition("node1"); err == nil || !strings.Contains(err.Error(), "this process") {
		t.Fatalf("Partition on a lab without live proxies: %v", err)
	}
}

func TestFillDisk(t *testing.T) {
	l := upLab(t, lab.Options{DiskLimit: 256 << 20})
	if ok, why := l.DiskFaultsAvailable(); !ok {
		// Root can mount a tmpfs: on this project's machines (root) the
		// fault must work. Elsewhere the lab falls back to plain folders,
		// and the fault must refuse clearly and leave no mount.
		if os.Geteuid() == 0 {
			t.Fatalf("disk faults unavailable though running as root: %s", why)
		}
		if err := l.FillDisk("node1"); err == nil {
			t.Fatal("FillDisk on a lab without size-limited disks succeeded")
		}
		if m, err := l.MountedDisks(); err != nil || len(m) != 0 {
			t.Fatalf("mounted disks %v, %v: want none after the fallback", m, err)
		}
		return
	}
	if m, err := l.MountedDisks(); err != nil || len(m) != 3 {
		t.Fatalf("mounted disks %v, %v: want 3", m, err)
	}
	_, followers := roles(t, l)
	f := followers[0].Node
	if err := l.FillDisk(f); err != nil {
		t.Fatal(err)
	}
	// Enough data that the filled member's db must grow into pages it has
	// no room for (its WAL segment is preallocated).
	rest := client(t, l, others(l, f)...)
	val := strings.Repeat("x", 64<<10)
	start := time.Now()
	for i := range 200 {
		if err := put(rest, fmt.Sprintf("disk/%03d", i), val); err != nil {
			t.Fatalf("write %d while %s's disk is full: %v", i, f, err)
		}
	}
	t.Logf("200 writes of 64 KiB through the others in %s", time.Since(start).Round(time.Millisecond))
	labtest.Eventually(t, 20*time.Second, f+" meets its full disk", func() error {
		if len(etcdLogLines(t, l, f, "no space left on device")) == 0 {
			return errors.New("no ENOSPC in its etcd log yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second) // what it does next: crash-loop under its supervisor
	pid, perr := l.EtcdPID(f)
	t.Logf("%s after the writes: etcd pid %d (%v)", f, pid, perr)
	for _, line := range etcdLogLines(t, l, f, `"level":"fatal"`, `"level":"panic"`, "panic:") {
		t.Logf("%s etcd log: %.300s", f, line)
	}
	if err := l.FreeDisk(f); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := l.WaitHealthy(context.Background(), 3, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	labtest.Eventually(t, 30*time.Second, f+" has the writes", func() error {
		_, err := serializableValue(client(t, l, f), "disk/199")
		return err
	})
	t.Logf("%s healthy %s after FreeDisk", f, time.Since(start).Round(time.Millisecond))
	// and stays so: no ENOSPC crash after the disk was freed.
	pid, err := l.EtcdPID(f)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := l.WaitHealthy(context.Background(), 3, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if again, err := l.EtcdPID(f); err != nil || again != pid {
		t.Fatalf("%s's etcd restarted after FreeDisk: pid %d then %d (%v)", f, pid, again, err)
	}

	if err := l.Down(context.Background()); err != nil {
		t.Fatal(err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), l.Spec.Dir+"/") {
		t.Fatalf("mounts left under %s after Down:\n%s", l.Spec.Dir, mi)
	}
}

// tearAndRestart tears the WAL tail of f's stopped member and starts it.
func tearAndRestart(t *testing.T, l *lab.Lab, f string) lab.TornRecord {
	t.Helper()
	torn, err := l.TearWALTail(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tore %+v", torn)
	if err := l.StartMember(f); err != nil {
		t.Fatal(err)
	}
	return torn
}

func TestTearWALTail(t *testing.T) {
	l := upLab(t, lab.Options{})
	cli := client(t, l, others(l, "")...)
	for i := range 100 {
		if err := put(cli, fmt.Sprintf("tear/%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	_, followers := roles(t, l)

	// A member stopped as a kubelet stops it closes its WAL, which writes
	// out the HardState after its last entries: that record is the tail
	// torn, the member loses nothing it acknowledged, repairs and rejoins.
	t.Run("stopped", func(t *testing.T) {
		f := followers[0].Node
		if _, err := l.TearWALTail(f); err == nil {
			t.Fatal("TearWALTail on a running member succeeded")
		}
		if err := l.StopMember(f); err != nil {
			t.Fatal(err)
		}
		if torn := tearAndRestart(t, l, f); torn.TypeName != "state" {
			t.Errorf("the last WAL record of a stopped member is a %s record, not its HardState", torn.TypeName)
		}
		if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		fc := client(t, l, f)
		labtest.Eventually(t, 30*time.Second, f+" has the keys", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			r, err := fc.Get(ctx, "tear/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
			if err == nil && r.Count != 100 {
				err = fmt.Errorf("%d keys", r.Count)
			}
			return err
		})
		if h, err := invariant.CheckHashKV(context.Background(), cli, 30*time.Second); err != nil {
			t.Fatal(err)
		} else {
			t.Logf("HashKV %v", h)
		}
		lines := etcdLogLines(t, l, f, `"repair`)
		for _, line := range lines {
			t.Logf("%s etcd log: %.400s", f, line)
		}
		if len(lines) == 0 {
			t.Fatalf("%s's etcd log shows no WAL repair", f)
		}
	})

	// A SIGKILLed member's WAL ends in its last fsynced record: etcd does
	// not sync a HardState that only moves the commit index, so that one
	// died in its write buffer and the tail is an entry the member had
	// acknowledged. Losing it is more than a torn write can lose: what
	// etcd does then is logged (raft panics on the leader's heartbeat:
	// "tocommit(N) is out of range [lastIndex(N-1)]").
	t.Run("crashed", func(t *testing.T) {
		f := followers[1].Node
		pid, err := l.CrashMember(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("SIGKILLed etcd %d on %s", pid, f)
		torn := tearAndRestart(t, l, f)
		labtest.Eventually(t, 30*time.Second, f+" repairs its WAL", func() error {
			if len(etcdLogLines(t, l, f, `"repaired WAL"`)) == 0 {
				return errors.New("no repair logged yet")
			}
			return nil
		})
		time.Sleep(3 * time.Second)
		for _, line := range etcdLogLines(t, l, f, `"repaired WAL"`, "tocommit", "panic:") {
			t.Logf("%s etcd log (torn %s record): %.300s", f, torn.TypeName, line)
		}
	})
}
