package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// containerdSocket is where kubelet and ctr find containerd (inside the node).
const containerdSocket = "/run/containerd/containerd.sock"

// Run is the node process: it must run in a network and mount namespace of
// its own (the lab starts it so) with labNS, the lab's network namespace,
// open. It returns when ctx ends (SIGTERM), after stopping kubelet, every
// container and containerd.
func Run(ctx context.Context, c Config, labNS *os.File, log *zap.Logger) error {
	l := Layout{NodeDir: c.NodeDir}
	if err := layMounts(l); err != nil {
		return err
	}
	log.Info("node mounts laid out", zap.String("nodeDir", c.NodeDir))
	if err := layNetwork(ctx, c, log); err != nil {
		return err
	}
	log.Info("node network up", zap.String("ip", c.NodeIP))
	fwd, err := newForwarder(labNS, log)
	if err != nil {
		return err
	}
	fctx, stopForwarding := context.WithCancel(context.WithoutCancel(ctx))
	defer stopForwarding()
	if err := fwd.serve(fctx, c.Forwards); err != nil {
		return err
	}
	env := append(os.Environ(), "PATH="+c.BinDir+":"+os.Getenv("PATH"))
	ctrd, err := start(filepath.Join(c.BinDir, "containerd"), []string{"--config", c.ContainerdConfig}, env, filepath.Join(l.Logs(), "containerd.log"))
	if err != nil {
		return err
	}
	var kubelet *exec.Cmd
	defer func() {
		stopAll(c, kubelet, ctrd, log)
		stopForwarding()
	}()
	if err := waitFor(ctx, "containerd's socket", 60*time.Second, log, func() bool {
		return exec.Command(filepath.Join(c.BinDir, "ctr"), "--address", containerdSocket, "version").Run() == nil
	}); err != nil {
		return err
	}
	log.Info("containerd serves", zap.Int("pid", ctrd.Process.Pid))
	for _, img := range c.Images {
		if err := ctr(c, "images", "import", "--snapshotter", "overlayfs", img); err != nil {
			return err
		}
	}
	if err := pinImages(c); err != nil {
		return err
	}
	log.Info("images imported", zap.Strings("images", c.Images))
	kubelet, err = start(filepath.Join(c.BinDir, "kubelet"), c.KubeletArgs, env, filepath.Join(l.Logs(), "kubelet.log"))
	if err != nil {
		return err
	}
	log.Info("kubelet started", zap.Int("pid", kubelet.Process.Pid))
	exited := make(chan string, 2)
	go func() { _ = kubelet.Wait(); exited <- "kubelet" }()
	go func() { _ = ctrd.Wait(); exited <- "containerd" }()
	select {
	case <-ctx.Done():
		log.Info("stopping the node")
		return nil
	case who := <-exited:
		return fmt.Errorf("%s exited (its log is in %s)", who, l.Logs())
	}
}

// ctr runs containerd's ctr in the k8s.io namespace (the CRI's).
func ctr(c Config, args ...string) error {
	argv := append([]string{"--address", containerdSocket, "--namespace", "k8s.io"}, args...)
	out, err := exec.Command(filepath.Join(c.BinDir, "ctr"), argv...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// pinImages labels every imported image pinned: kubelet's image GC never
// removes it (there is no registry to pull it from again).
func pinImages(c Config) error {
	out, err := exec.Command(filepath.Join(c.BinDir, "ctr"), "--address", containerdSocket, "--namespace", "k8s.io",
		"images", "ls", "-q").Output()
	if err != nil {
		return fmt.Errorf("ctr images ls: %w", err)
	}
	for _, ref := range strings.Fields(string(out)) {
		if err := ctr(c, "images", "label", ref, "io.cri-containerd.pinned=pinned"); err != nil {
			return err
		}
	}
	return nil
}

func start(bin string, args, env []string, logPath string) (*exec.Cmd, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return cmd, nil
}

func waitFor(ctx context.Context, what string, timeout time.Duration, log *zap.Logger, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s", what, timeout)
		}
		log.Debug("waiting", zap.String("for", what))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// stopAll stops kubelet first (it would restart what is killed), then
// every container (containerd leaves them running when it stops), then
// containerd, and last every process still in this mount namespace (shims
// and their children are re-parented away from us).
func stopAll(c Config, kubelet, ctrd *exec.Cmd, log *zap.Logger) {
	stop(kubelet, 10*time.Second, log)
	if out, err := exec.Command(filepath.Join(c.BinDir, "ctr"), "--address", containerdSocket, "--namespace", "k8s.io",
		"tasks", "ls", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			_ = ctr(c, "tasks", "kill", "--signal", "SIGKILL", id)
		}
	}
	stop(ctrd, 10*time.Second, log)
	if n := KillNamespace(os.Getpid(), log); n > 0 {
		log.Info("killed what was left in the node", zap.Int("processes", n))
	}
}

func stop(cmd *exec.Cmd, grace time.Duration, log *zap.Logger) {
	if cmd == nil || cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _, _ = cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		log.Warn("did not stop in time; killing it", zap.String("cmd", cmd.Path), zap.Duration("grace", grace))
		_ = cmd.Process.Kill()
		<-done
	}
}

// KillNamespace SIGKILLs every process but self that shares self's mount
// namespace (by /proc/<pid>/ns/mnt) and returns how many it signalled. The
// lab calls it too, for a node process that died without cleaning up.
func KillNamespace(self int, log *zap.Logger) int {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", self))
	if err != nil {
		return 0
	}
	return KillMountNamespace(ns, self, log)
}

// KillMountNamespace SIGKILLs every process (but except) whose mount
// namespace is ns ("mnt:[inode]").
func KillMountNamespace(ns string, except int, log *zap.Logger) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == except {
			continue
		}
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && got == ns {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil || !errors.Is(err, syscall.ESRCH) {
				n++
			}
		}
	}
	if log != nil && n > 0 {
		log.Info("killed processes of the node's mount namespace", zap.String("ns", ns), zap.Int("count", n))
	}
	return n
}
