package lab

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/lab/realnode"
)

// CollectRealNodeLogs copies the real node's etcd and agent container logs,
// as kubelet writes them (/var/log/pods/<ns>_<pod>_<uid>/<container>/N.log,
// each line "<time> <stream> <P|F> <text>"), into the node's logs folder
// under the names `lab supervise` gives them (etcd-<node>_etcd.log,
// etcd-agent-<node>_etcd-agent.log), one JSON line each: the scenarios read
// every node's logs alike. Every container run, oldest first.
func (l *Lab) CollectRealNodeLogs() error {
	r := l.Spec.RealNode
	if r == nil {
		return nil
	}
	n, err := l.Spec.Node(r.Name)
	if err != nil {
		return err
	}
	pods := filepath.Join(realnode.Layout{NodeDir: n.NodeDir}.VarLog(), "pods")
	for _, c := range []struct{ glob, out string }{
		{filepath.Join(pods, "kube-system_etcd-"+n.Name+"_*", "etcd", "*.log"), "etcd-" + n.Name + "_etcd.log"},
		{filepath.Join(pods, AgentNamespace+"_"+ShippedDaemonSet+"-*", "etcd-agent", "*.log"), "etcd-agent-" + n.Name + "_etcd-agent.log"},
	} {
		files, _ := filepath.Glob(c.glob)
		slices.SortFunc(files, func(a, b string) int { return compareLogFiles(a, b) })
		var out bytes.Buffer
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			out.Write(criLogText(b))
		}
		if err := os.WriteFile(filepath.Join(n.LogsDir, c.out), out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// compareLogFiles orders container logs by modification time (pods come
// and go), then by restart count (N.log).
func compareLogFiles(a, b string) int {
	sa, ea := os.Stat(a)
	sb, eb := os.Stat(b)
	if ea == nil && eb == nil && filepath.Dir(a) != filepath.Dir(b) {
		return sa.ModTime().Compare(sb.ModTime())
	}
	na, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(a), ".log"))
	nb, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(b), ".log"))
	return na - nb
}

// criLogText strips the CRI log prefix and joins partial lines (P).
func criLogText(b []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.SplitN(line, []byte(" "), 4)
		if len(f) < 4 {
			continue
		}
		out.Write(f[3])
		if string(f[2]) != "P" {
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}

// realContainerPID finds a container's main process on the real node: the
// process in the node's network namespace (its pods are hostNetwork) whose
// command line starts with argv0 and holds every one of args.
func (l *Lab) realContainerPID(argv0 string, args ...string) (int, error) {
	r := l.Spec.RealNode
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil || ns != r.NetNS {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(argv) == 0 || argv[0] != argv0 || !procAlive(pid, "") {
			continue
		}
		if slices.ContainsFunc(args, func(a string) bool { return !slices.Contains(argv, a) }) {
			continue
		}
		return pid, nil
	}
	return 0, fmt.Errorf("no %s %v running on the real node %s", argv0, args, r.Name)
}
