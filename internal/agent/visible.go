package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/watchdog"
)

// visibleOnNode checks that the agent sees where the member's data dir and
// WAL dir live: each one's parent must be a dir in the agent's view. A dir
// the agent cannot see reads as missing, the class of a wiped member, and
// a heal would replace a healthy member and leave its files where etcd
// reads them (review of issue 38: a --wal-dir under a host path the
// DaemonSet does not mount). The dirs themselves may be missing: that is
// what a wipe looks like, and etcd's kubelet creates them.
//
// The parent's existence does not prove it is the node's (review: /var
// exists in every container; a --wal-dir=/var/etcd-wal with only /var/lib
// mounted passed): with nodePaths (--node-paths, the container's hostPath
// mounts) each dir must also lie under one of them.
func visibleOnNode(id watchdog.Identity, nodePaths []string) error {
	for _, d := range []struct{ what, path string }{{"data dir", id.DataDir}, {"WAL dir (--wal-dir)", id.WALDir}} {
		if d.path == "" {
			continue
		}
		if len(nodePaths) > 0 && !slices.ContainsFunc(nodePaths, func(np string) bool { return isUnder(d.path, np) }) {
			return fmt.Errorf("member %s: the %s %s is under none of the node dirs mounted into the agent (--node-paths %s): mount the host dir that holds it "+
				"into the agent's container at the same path (a hostPath volume of its parent or above) and add it to --node-paths (see deploy/README.md)",
				id.Name, d.what, d.path, strings.Join(nodePaths, ","))
		}
		parent := filepath.Dir(filepath.Clean(d.path))
		fi, err := os.Stat(parent)
		if err == nil && fi.IsDir() {
			continue
		}
		why := "is not a directory"
		if err != nil {
			why = err.Error()
		}
		return fmt.Errorf("member %s: the %s %s is not visible to the agent (its parent %s: %s): mount the host dir that holds it into the agent's container "+
			"at the same path (a hostPath volume of its parent or above, never of the dir itself: see deploy/README.md)", id.Name, d.what, d.path, parent, why)
	}
	return nil
}

// isUnder: path is dir or inside it.
func isUnder(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
