package realnode

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// layMounts gives the node (this process's own mount namespace) the paths a
// real node has, each backed by a folder of the node dir, so that the
// shipped DaemonSet's hostPaths (/var/lib, /etc/kubernetes/...) work
// unchanged. Nothing here reaches the machine's mount namespace: / is made
// a slave first. Then / is made shared again inside the node, as on a
// systemd host: kubelet and containerd need shared or slave mounts for
// HostToContainer propagation (the DaemonSet's /var/lib).
func layMounts(l Layout) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave in the node's mount namespace: %w", err)
	}
	opts := fmt.Sprintf("lowerdir=/etc,upperdir=%s,workdir=%s", l.EtcUpper(), l.EtcWork())
	if err := unix.Mount("overlay", "/etc", "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay on /etc: %w", err)
	}
	if err := os.MkdirAll("/etc/kubernetes", 0o755); err != nil {
		return err
	}
	binds := []struct{ src, dst string }{
		{l.Kubernetes(), "/etc/kubernetes"},
		{l.VarLib(), "/var/lib"},
		{l.VarLog(), "/var/log"},
	}
	for _, b := range binds {
		if err := unix.Mount(b.src, b.dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", b.src, b.dst, err)
		}
	}
	// containerd's socket and state, runc's state: the node's own.
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		return fmt.Errorf("tmpfs on /run: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make / shared in the node's mount namespace: %w", err)
	}
	for _, d := range []string{"/var/lib/kubelet", "/var/lib/containerd", "/etc/kubernetes/manifests", "/etc/cni/net.d"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// A loopback-only CNI config: hostNetwork pods run no plugin, but
	// without a config containerd reports the network not ready and the
	// Node stays NotReady.
	conf := `{"cniVersion":"1.0.0","name":"lab-loopback","plugins":[{"type":"loopback"}]}`
	return os.WriteFile(filepath.Join("/etc/cni/net.d", "10-loopback.conflist"), []byte(conf), 0o644)
}
