package lab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/realnode"
	"go.uber.org/zap"
)

// RealNode is the lab's node run by the real kubelet, containerd and runc
// (Options.RealNode; docs/management-lab.md, "The real node"): a process of
// its own (`lab real-node`) in a network and mount namespace of its own,
// joined to the lab by a veth.
type RealNode struct {
	// Name is the lab node it is (the last one).
	Name string `json:"name"`
	// PID is the node process; MountNS and NetNS ("mnt:[inode]") find
	// what it leaves behind if it dies.
	PID     int    `json:"pid"`
	MountNS string `json:"mountNS,omitempty"`
	NetNS   string `json:"netNS,omitempty"`
	// HostLink is the veth's end in the lab's namespace, with HostIP; the
	// node's end is eth0 with NodeIP, both in one /30 of TEST-NET-2.
	HostLink string `json:"hostLink"`
	HostIP   string `json:"hostIP"`
	NodeIP   string `json:"nodeIP"`
	// CgroupRoot is kubelet's --cgroup-root, made by the lab in every
	// cgroup v1 hierarchy (CgroupDirs) and removed at Down.
	CgroupRoot string   `json:"cgroupRoot"`
	CgroupDirs []string `json:"cgroupDirs,omitempty"`
	// Sysctls are the values kubelet needs, as they were before Up set
	// them; Down restores them.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// ControllerManager and Scheduler run the DaemonSet controller and
	// scheduling for the shipped DaemonSet.
	// AgentEnv: Options.RealNodeAgentEnv.
	AgentEnv          map[string]string `json:"agentEnv,omitempty"`
	ControllerManager *Process          `json:"controllerManager,omitempty"`
	Scheduler         *Process          `json:"scheduler,omitempty"`
}

// realNodeNet is the /30 of TEST-NET-2 (198.51.100.0/24, RFC 5737) a real
// node uses: one per lab, so that labs on one machine differ.
const realNodeNet = "198.51.100."

// realNodeServiceIP is the `kubernetes` Service's ClusterIP (the first IP of
// the API server's --service-cluster-ip-range): in-cluster clients dial it,
// and with no kube-proxy the node forwards it to the API server.
const realNodeServiceIP = "10.96.0.1"

// kubeletSysctls are what kubelet 1.37 requires (setupKernelTunables); with
// protectKernelDefaults it refuses to start unless they hold, and without it
// it would set them and never restore them.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// RealNodeUnavailable says why this machine cannot run a real node ("" if
// it can): root, the binaries (make tools), the images (make images),
// cgroup v1 and the ip tool.
func RealNodeUnavailable(binDir string) string {
	if os.Geteuid() != 0 {
		return "a real node needs root (namespaces, mounts, cgroups, sysctls)"
	}
	var missing []string
	for _, b := range append(realNodeBinaries(), realNodeImages(binDir)...) {
		p := b
		if !filepath.IsAbs(p) {
			p = filepath.Join(binDir, b)
		}
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("missing %s: run `make tools images`", strings.Join(missing, ", "))
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the ip tool (iproute2) is missing"
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		return "no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory (the lab's real node runs kubelet on cgroup v1)"
	}
	return ""
}

func realNodeBinaries() []string {
	return []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "cni/loopback"}
}

// realNodeImages are the archives `make images` writes (hack/images).
func realNodeImages(binDir string) []string {
	var out []string
	for _, n := range []string{"etcd-agent", "etcd", "pause"} {
		out = append(out, filepath.Join(binDir, "images", n+".tar"))
	}
	return out
}

// Image names the node runs (hack/images writes them; `.invalid` can never
// be pulled, and the node has no route out anyway).
const (
	AgentImage = "etcd-agent.invalid/etcd-agent:lab"
	EtcdImage  = "etcd-agent.invalid/etcd:lab"
	PauseImage = "etcd-agent.invalid/pause:lab"
)

// pickRealNodeNet takes the first /30 of TEST-NET-2 whose host address no
// link of this machine has (another lab's), by adding it: an add that
// fails because another lab took it meanwhile tries the next.
func pickRealNodeNet(link string) (hostIP, nodeIP string, err error) {
	if err := runIP("link", "add", link, "type", "veth", "peer", "name", link+"n"); err != nil {
		return "", "", err
	}
	for k := range 63 {
		host := fmt.Sprintf("%s%d", realNodeNet, 4*k+1)
		if addrInUse(host) {
			continue
		}
		if err := runIP("addr", "add", host+"/30", "dev", link); err != nil {
			continue
		}
		return host, fmt.Sprintf("%s%d", realNodeNet, 4*k+2), nil
	}
	_ = runIP("link", "del", link)
	return "", "", errors.New("no free /30 left in 198.51.100.0/24 for a real node")
}

func addrInUse(ip string) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.String() == ip {
			return true
		}
	}
	return false
}

func runIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startRealNodeProcess starts `lab real-node` in a new network and mount
// namespace, with this process's network namespace on its fd 3, and moves
// the veth's node end into it.
func (l *Lab) startRealNodeProcess(n *Node) error {
	r := l.Spec.RealNode
	labNS, err := os.Open("/proc/self/ns/net")
	if err != nil {
		return err
	}
	defer labNS.Close()
	logf, err := os.OpenFile(filepath.Join(n.LogsDir, "real-node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(l.Spec.LabBinary, "real-node", "--node-dir", n.NodeDir, "--log-format", "json")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{labNS}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the real node: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	r.PID = cmd.Process.Pid
	r.MountNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", r.PID))
	r.NetNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/net", r.PID))
	if err := l.Spec.save(); err != nil {
		return err
	}
	peer := r.HostLink + "n"
	if err := runIP("link", "set", peer, "netns", fmt.Sprint(r.PID)); err != nil {
		return err
	}
	// Renamed inside: the node's end is eth0, as on a VM.
	if err := exec.Command("nsenter", "--net=/proc/"+fmt.Sprint(r.PID)+"/ns/net", "ip", "link", "set", peer, "name", realnode.EthName).Run(); err != nil {
		return fmt.Errorf("rename the node's veth end: %w", err)
	}
	return runIP("link", "set", r.HostLink, "up")
}

// saveAndSetSysctls records the values kubelet needs as they are, then sets
// them (Down restores the record).
func (r *RealNode) saveAndSetSysctls() error {
	if r.Sysctls == nil {
		r.Sysctls = map[string]string{}
	}
	for k, want := range kubeletSysctls {
		p := filepath.Join("/proc/sys", k)
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("read sysctl %s: %w", k, err)
		}
		if _, saved := r.Sysctls[k]; !saved {
			r.Sysctls[k] = strings.TrimSpace(string(b))
		}
		if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
			return fmt.Errorf("set sysctl %s=%s for kubelet: %w", k, want, err)
		}
	}
	return nil
}

// cgroupHierarchies are the cgroup mounts kubelet's --cgroup-root must
// exist in (every v1 hierarchy, and the hybrid unified one).
func cgroupHierarchies() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		i := indexOf(f, "-")
		if i < 0 || i+1 >= len(f) || len(f) < 5 {
			continue
		}
		if fs := f[i+1]; (fs == "cgroup" || fs == "cgroup2") && strings.HasPrefix(f[4], "/sys/fs/cgroup/") {
			out = append(out, f[4])
		}
	}
	return out, nil
}

func indexOf(f []string, s string) int {
	for i, v := range f {
		if v == s {
			return i
		}
	}
	return -1
}

// makeCgroupRoot creates kubelet's cgroup root in every hierarchy; a new
// cpuset cgroup has no CPUs or memory nodes until given its parent's.
func (r *RealNode) makeCgroupRoot() error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		d := filepath.Join(h, r.CgroupRoot)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup root for kubelet: %w", err)
		}
		r.CgroupDirs = append(r.CgroupDirs, d)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// downRealNode stops the node process (it stops kubelet, the containers
// and containerd), then kills whatever is left in its namespaces or
// cgroups, removes the cgroups and the veth, and restores the sysctls.
func (l *Lab) downRealNode() error {
	r := l.Spec.RealNode
	if r == nil {
		return nil
	}
	var errs []error
	if r.PID > 0 {
		n, _ := l.Spec.Node(r.Name)
		marker := ""
		if n != nil {
			marker = n.NodeDir
		}
		errs = append(errs, stopPID(r.PID, marker, 60*time.Second))
	}
	for _, ns := range []string{r.MountNS} {
		if ns != "" {
			realnode.KillMountNamespace(ns, 0, l.log)
		}
	}
	if r.NetNS != "" {
		killNetNamespace(r.NetNS, l.log)
	}
	for range 50 {
		if killCgroups(r.CgroupDirs) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := len(r.CgroupDirs) - 1; i >= 0; i-- {
		errs = append(errs, removeCgroupTree(r.CgroupDirs[i]))
	}
	if r.HostLink != "" {
		// It goes with the node's namespace, unless something holds that.
		if _, err := net.InterfaceByName(r.HostLink); err == nil {
			if err := runIP("link", "del", r.HostLink); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
				errs = append(errs, err)
			}
		}
	}
	for k, v := range r.Sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}

func killNetNamespace(ns string, log *zap.Logger) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if got, err := os.Readlink("/proc/" + e.Name() + "/ns/net"); err == nil && got == ns && e.Name() != fmt.Sprint(os.Getpid()) {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				log.Info("killed a process left in the real node's network namespace", zap.Int("pid", pid))
			}
		}
	}
}

// killCgroups SIGKILLs every process in the cgroup trees and says how many
// were still there.
func killCgroups(dirs []string) int {
	n := 0
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				var pid int
				if _, err := fmt.Sscan(f, &pid); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
	}
	return n
}

// removeCgroupTree removes a cgroup dir and its children, deepest first
// (cgroup dirs are removed with rmdir, their files with them).
func removeCgroupTree(d string) error {
	var dirs []string
	_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// RealNodeLeftovers lists what of the real node is still on the machine:
// a process in its namespaces or cgroups, a cgroup dir, the veth, a mount
// of the lab dir, a sysctl not restored. Empty after a clean Down.
func (l *Lab) RealNodeLeftovers() []string {
	r := l.Spec.RealNode
	if r == nil {
		return nil
	}
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		for _, ns := range []struct{ kind, id string }{{"mnt", r.MountNS}, {"net", r.NetNS}} {
			if got, err := os.Readlink("/proc/" + e.Name() + "/ns/" + ns.kind); err == nil && ns.id != "" && got == ns.id {
				out = append(out, fmt.Sprintf("process %s in the node's %s namespace", e.Name(), ns.kind))
			}
		}
	}
	for _, d := range r.CgroupDirs {
		if _, err := os.Stat(d); err == nil {
			out = append(out, "cgroup "+d)
		}
	}
	if _, err := net.InterfaceByName(r.HostLink); err == nil {
		out = append(out, "link "+r.HostLink)
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, " "+l.Spec.Dir+"/") {
				out = append(out, "mount "+line)
			}
		}
	}
	for k, v := range r.Sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil && strings.TrimSpace(string(b)) != v {
			out = append(out, fmt.Sprintf("sysctl %s=%s, was %s", k, strings.TrimSpace(string(b)), v))
		}
	}
	return out
}
