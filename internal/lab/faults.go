package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// containerPID returns the PID of a running container of the node's static
// pod manifest (e.g. "etcd.yaml", "etcd").
func (l *Lab) containerPID(node, manifest, container string) (int, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return 0, err
	}
	if n.Real {
		switch container {
		case "etcd": // after the gate's exec
			return l.realContainerPID("etcd", "--name="+n.Member)
		case "etcd-agent":
			return l.realContainerPID("/usr/local/bin/etcd-agent", "run")
		}
		return 0, fmt.Errorf("node %s is real: no lab container %s", node, container)
	}
	st, err := readSupervisorState(*n)
	if err != nil {
		return 0, fmt.Errorf("node %s supervisor state: %w", node, err)
	}
	c, ok := st.Container(manifest, container)
	if !ok || c.State != "running" || c.PID == 0 {
		return 0, fmt.Errorf("node %s: container %s of %s is not running", node, container, manifest)
	}
	return c.PID, nil
}

// EtcdPID is the PID of the node's running etcd member.
func (l *Lab) EtcdPID(node string) (int, error) { return l.containerPID(node, "etcd.yaml", "etcd") }

// KillMember SIGKILLs the node's etcd process; its supervisor restarts it.
func (l *Lab) KillMember(node string) (int, error) {
	pid, err := l.EtcdPID(node)
	if err != nil {
		return 0, err
	}
	l.log.Info("fault: kill member", zap.String("node", node), zap.Int("pid", pid))
	return pid, signalOurs(pid, l.etcdMarker(node), syscall.SIGKILL)
}

// etcdMarker is what node's etcd command line holds that no stranger's
// does: the lab dir, or on the real node (paths of its own) the lab's
// cluster token.
func (l *Lab) etcdMarker(node string) string {
	if n, err := l.Spec.Node(node); err == nil && n.Real {
		return "--initial-cluster-token=" + l.Spec.ClusterToken
	}
	return l.Spec.Dir
}

// Pause SIGSTOPs the node's etcd process (a hung member); Resume undoes it.
func (l *Lab) Pause(node string) error { return l.signalEtcd(node, syscall.SIGSTOP) }

// Resume SIGCONTs a paused etcd process.
func (l *Lab) Resume(node string) error { return l.signalEtcd(node, syscall.SIGCONT) }

func (l *Lab) signalEtcd(node string, sig syscall.Signal) error {
	pid, err := l.EtcdPID(node)
	if err != nil {
		return err
	}
	l.log.Info("fault: signal member", zap.String("node", node), zap.Int("pid", pid), zap.Stringer("signal", sig))
	return signalOurs(pid, l.etcdMarker(node), sig)
}

// WipeDataDir removes the node's etcd data dir while etcd may be running
// (the disk lost its contents). This is the fault; the agent itself never deletes.
func (l *Lab) WipeDataDir(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	if n.DataDir == "" {
		return fmt.Errorf("node %s has no etcd data dir", node)
	}
	l.log.Info("fault: wipe data dir", zap.String("node", node), zap.String("dir", n.DataDir))
	l.wipesMu.Lock()
	l.wipes = append(l.wipes, Wipe{Node: node, At: time.Now()})
	l.wipesMu.Unlock()
	if err := wipeDataDir(*n); err != nil {
		return err
	}
	if n.WALDir != "" {
		// A dedicated WAL dir goes with it: the member's whole state.
		return removeAllRacing(n.WALDir)
	}
	return nil
}

// WipeDataDirContents removes everything inside the node's etcd data dir
// (its member/), and a dedicated WAL dir, while etcd may be running, but
// leaves the data dir itself: on a kubeadm node the data dir is the root of
// etcd's hostPath volume, and `rm -rf /var/lib/etcd/*` (or a disk that lost
// its contents) is what a wipe looks like there. Recorded as a wipe.
func (l *Lab) WipeDataDirContents(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	if n.DataDir == "" {
		return fmt.Errorf("node %s has no etcd data dir", node)
	}
	l.log.Info("fault: wipe data dir contents", zap.String("node", node), zap.String("dir", n.DataDir))
	l.wipesMu.Lock()
	l.wipes = append(l.wipes, Wipe{Node: node, At: time.Now()})
	l.wipesMu.Unlock()
	entries, err := os.ReadDir(n.DataDir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := removeAllRacing(filepath.Join(n.DataDir, e.Name())); err != nil {
			return err
		}
	}
	if n.WALDir != "" {
		return removeAllRacing(n.WALDir)
	}
	return nil
}

// ReplaceDataDirWithFile removes the node's etcd data dir while etcd may be
// running and puts a regular file at its path (a bad restore, a mistyped
// cp). etcd keeps running on its open files; the file is what the agent
// must quarantine. Recorded as a wipe: etcd's purge loop ends it the same way.
func (l *Lab) ReplaceDataDirWithFile(node string) (string, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return "", err
	}
	if n.DataDir == "" {
		return "", fmt.Errorf("node %s has no etcd data dir", node)
	}
	content := fmt.Sprintf("not an etcd data dir: the lab's fault put this file here at %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	l.log.Info("fault: replace data dir by a regular file", zap.String("node", node), zap.String("dir", n.DataDir))
	l.wipesMu.Lock()
	l.wipes = append(l.wipes, Wipe{Node: node, At: time.Now()})
	l.wipesMu.Unlock()
	if err := removeAllRacing(n.DataDir); err != nil {
		return "", err
	}
	return content, os.WriteFile(n.DataDir, []byte(content), 0o600)
}

// Wipe is one WipeDataDir (or WipeDataDirContents, ReplaceDataDirWithFile):
// which node's data dir, and when it began; or one WipePodData, with Pod
// (ns/pod) set and Node empty.
type Wipe struct {
	Node string
	Pod  string
	At   time.Time
}

// Wipes are the data dir wipes this Lab value made, oldest first.
func (l *Lab) Wipes() []Wipe {
	l.wipesMu.Lock()
	defer l.wipesMu.Unlock()
	return append([]Wipe(nil), l.wipes...)
}

// CorruptDB overwrites bytes in the middle of the node's member/snap/db
// and its two bbolt meta pages, so that bbolt refuses to open it.
func (l *Lab) CorruptDB(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	return l.corruptDBIn(node, n.DataDir)
}

// corruptDBIn corrupts the bbolt db of the data dir of member (a node or a pod).
func (l *Lab) corruptDBIn(member, dataDir string) error {
	path := filepath.Join(dataDir, "member", "snap", "db")
	l.log.Info("fault: corrupt db", zap.String("member", member), zap.String("file", path))
	return corruptFile(path, []int64{0, 4096, -1})
}

// CorruptWAL overwrites bytes in the newest WAL file of the node's member.
func (l *Lab) CorruptWAL(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	return l.corruptWALIn(node, n.DataDir)
}

// corruptWALIn corrupts the newest WAL file in the data dir of member.
func (l *Lab) corruptWALIn(member, dataDir string) error {
	files, err := filepath.Glob(filepath.Join(dataDir, "member", "wal", "*.wal"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("%s: no WAL files under %s", member, dataDir)
	}
	sort.Strings(files)
	l.log.Info("fault: corrupt wal", zap.String("member", member), zap.String("file", files[len(files)-1]))
	return corruptFile(files[len(files)-1], []int64{64, -1})
}

// corruptFile writes 512 garbage bytes at each offset (-1 = the middle).
func corruptFile(path string, offsets []int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	junk := make([]byte, 512)
	for i := range junk {
		junk[i] = byte(0xA5 ^ i)
	}
	for _, off := range offsets {
		if off < 0 {
			off = st.Size() / 2
		}
		if off >= st.Size() {
			continue
		}
		if _, err := f.WriteAt(junk, off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// LoseNode kills the node's supervisor, and with it its containers, at once
// (a node that died). With removeDisk its local disk is gone too.
func (l *Lab) LoseNode(node string, removeDisk bool) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	l.log.Info("fault: lose node", zap.String("node", node), zap.Bool("removeDisk", removeDisk))
	if procAlive(n.SupervisorPID, n.NodeDir) {
		_ = signalOurs(n.SupervisorPID, n.NodeDir, syscall.SIGKILL)
		if !waitGone(n.SupervisorPID, n.NodeDir, 5*time.Second) {
			return fmt.Errorf("supervisor %d of %s survived SIGKILL", n.SupervisorPID, node)
		}
	}
	// Its containers die with it (Pdeathsig); make sure by PID.
	if st, err := readSupervisorState(*n); err == nil {
		for _, p := range st.Pods {
			for _, c := range p.Containers {
				if procAlive(c.PID, l.Spec.Dir) {
					_ = signalOurs(c.PID, l.Spec.Dir, syscall.SIGKILL)
					waitGone(c.PID, l.Spec.Dir, 5*time.Second)
				}
			}
		}
	}
	n.Lost = true
	if removeDisk {
		if err := l.unmountDisk(n.DiskDir, false); err != nil {
			return err
		}
		if err := os.RemoveAll(n.DiskDir); err != nil {
			return err
		}
	}
	return l.Spec.save()
}

// AddNode creates a new empty node (next number, own loopback IP), starts its
// supervisor and creates its Node object. Its manifests dir is empty: place a
// static-pod manifest there to give it a member.
func (l *Lab) AddNode(ctx context.Context) (*Node, error) {
	n, err := l.newNode(l.nextNodeNumber(), false)
	if err != nil {
		return nil, err
	}
	if l.Spec.Management != nil {
		return l.addWorker(ctx, n)
	}
	if err := l.startSupervisor(&n); err != nil {
		return nil, err
	}
	if l.Spec.Agents {
		if err := l.writeAgentManifest(&n); err != nil {
			return nil, err
		}
	}
	l.Spec.Nodes = append(l.Spec.Nodes, n)
	if err := l.Spec.save(); err != nil {
		return nil, err
	}
	if l.Spec.APIServer != nil {
		kc, err := l.KubeClient()
		if err != nil {
			return nil, err
		}
		// Retried: right after a member was lost the API's etcd may time
		// out a request or two (an election), as a real one would.
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			last = l.createNodeObject(ctx, kc, n)
			return last == nil, nil
		}); err != nil {
			return nil, fmt.Errorf("%w (last: %v)", err, last)
		}
	}
	l.log.Info("added node", zap.String("node", n.Name), zap.String("ip", n.IP))
	return &l.Spec.Nodes[len(l.Spec.Nodes)-1], nil
}

// StopAPIServer stops kube-apiserver (the agents then have no Lease).
func (l *Lab) StopAPIServer() error {
	a := l.Spec.APIServer
	if a == nil {
		return fmt.Errorf("this lab has no kube-apiserver")
	}
	return stopPID(a.PID, a.Dir, 15*time.Second)
}

// StartAPIServer starts kube-apiserver again with the same flags and waits
// until it is ready.
func (l *Lab) StartAPIServer(ctx context.Context) error {
	a := l.Spec.APIServer
	if a == nil {
		return fmt.Errorf("this lab has no kube-apiserver")
	}
	if procAlive(a.PID, a.Dir) {
		return nil
	}
	proc, err := startDetached(a.Args, a.LogFile)
	if err != nil {
		return err
	}
	a.PID = proc.PID
	if err := l.Spec.save(); err != nil {
		return err
	}
	return waitAPIReady(ctx, a, proc, 120*time.Second)
}

// StopMember stops the node's etcd the way a static pod is stopped: its
// manifest is moved out of the manifests dir (the supervisor SIGTERMs it).
func (l *Lab) StopMember(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	l.log.Info("fault: stop member", zap.String("node", node))
	if err := os.Rename(n.EtcdManifest(), stoppedManifest(*n)); err != nil {
		return err
	}
	return l.waitEtcdGone(*n)
}

// StartMember moves a manifest stopped by StopMember back. A member that
// is not stopped (its manifest in place) is left alone, so an undo after
// a half-made fault is safe.
func (l *Lab) StartMember(node string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	l.log.Info("fault: start member", zap.String("node", node))
	err = os.Rename(stoppedManifest(*n), n.EtcdManifest())
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(n.EtcdManifest()); serr == nil {
			return nil
		}
	}
	return err
}

func stoppedManifest(n Node) string { return n.StoppedManifest() }

// StoppedManifest is where StopMember keeps the node's etcd manifest.
func (n Node) StoppedManifest() string { return filepath.Join(n.NodeDir, "etcd.yaml.stopped") }

// waitEtcdGone polls the supervisor state until the node runs no etcd.
func (l *Lab) waitEtcdGone(n Node) error {
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		st, err := readSupervisorState(n)
		if err != nil {
			return false, nil // being rewritten: read it again
		}
		_, running := st.Pods["etcd.yaml"]
		return !running, nil
	})
	if err != nil {
		return fmt.Errorf("etcd on %s still running 20s after its manifest was moved out", n.Name)
	}
	return nil
}

// MoveMember places the etcd member of node from on node to, as after a
// node was lost for good (UC1): the static-pod manifest keeps the member's
// name and peer URL, and points at to's (empty) local disk. Lose from first.
func (l *Lab) MoveMember(from, to string) error {
	src, err := l.Spec.Node(from)
	if err != nil {
		return err
	}
	dst, err := l.Spec.Node(to)
	if err != nil {
		return err
	}
	if !src.Lost {
		return fmt.Errorf("node %s is not lost: lose it first (two processes must never serve one member)", from)
	}
	moved := *dst
	// A member behind a peer proxy keeps its advertised (proxy) peer URL
	// and its listen URL: the proxy forwards to wherever it listens.
	moved.Member, moved.ClientURL, moved.PeerURL, moved.PeerListenURL = src.Member, src.ClientURL, src.PeerURL, src.PeerListenURL
	moved.MetricsURL, moved.EtcdBinary = src.MetricsURL, src.EtcdBinary // the member keeps its etcd version
	moved.DataDir = filepath.Join(dst.DiskDir, "etcd")
	m, err := etcdPodManifest(l.Spec, moved, initialCluster(l.Spec.Nodes), "existing", l.Spec.ClusterToken, l.gateCommand(moved), l.Spec.EtcdTLS)
	if err != nil {
		return err
	}
	l.log.Info("move member", zap.String("member", src.Member), zap.String("from", from), zap.String("to", to))
	dst.Member, dst.ClientURL, dst.PeerURL, dst.PeerListenURL, dst.DataDir = moved.Member, moved.ClientURL, moved.PeerURL, moved.PeerListenURL, moved.DataDir
	dst.MetricsURL, dst.EtcdBinary = moved.MetricsURL, moved.EtcdBinary
	src.ClientURL, src.PeerURL, src.PeerListenURL, src.MetricsURL = "", "", "", ""
	if l.peers != nil && moved.PeerListenURL != "" {
		if err := l.peers.retarget(moved.PeerURL, moved.PeerListenURL); err != nil {
			return err
		}
	}
	if err := l.Spec.save(); err != nil {
		return err
	}
	tmp := filepath.Join(dst.NodeDir, ".etcd.yaml.tmp")
	if err := os.WriteFile(tmp, m, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst.EtcdManifest())
}

// CopyDataDir copies node's etcd data dir (the member stopped) to dst, as a
// volume snapshot or a disk backup would keep it.
func (l *Lab) CopyDataDir(node, dst string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	l.log.Info("fault: copy data dir aside", zap.String("node", node), zap.String("dir", n.DataDir), zap.String("to", dst))
	return copyDir(n.DataDir, dst)
}

// copyDir copies the tree src to dst (which must not exist), keeping modes
// and times.
func copyDir(src, dst string) error {
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s to %s: %v: %s", src, dst, err, out)
	}
	return nil
}

// RestoreDataDir puts a copy made by CopyDataDir back as node's data dir (a
// PVC restored from a volume snapshot, a disk restored from a backup): the
// data dir it replaces is moved to aside, never deleted.
func (l *Lab) RestoreDataDir(node, src, aside string) error {
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	l.log.Info("fault: restore an older copy of the data dir", zap.String("node", node), zap.String("dir", n.DataDir), zap.String("from", src))
	return restoreInPlace(src, n.DataDir, aside)
}

// restoreInPlace puts a copy of src at dir in one step and moves the data
// dir it replaces to aside: the agent, looking at any moment, finds the old
// data dir or the restored one, never none or a half copy (seen in CI: a
// restore read mid-copy as corrupt, not stale). The copy is made beside dir
// (same filesystem) and exchanged with it (renameat2 RENAME_EXCHANGE).
func restoreInPlace(src, dir, aside string) error {
	tmp := dir + ".restoring"
	if err := copyDir(src, tmp); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("exchange %s with its restored copy: %w", dir, err)
	}
	return os.Rename(tmp, aside)
}
