// Command pause is the lab node's pod sandbox process (etcd-agent.invalid/pause:lab,
// docs/plans/real-node.md section 2): it holds the pod's namespaces open until
// SIGTERM or SIGINT, exits 0, and reaps zombies when it is the pod's PID 1
// (a shared PID namespace re-parents orphans to it). Static, no cgo, so it
// runs from an image with nothing else in it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every exited child: one SIGCHLD may stand for several.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
