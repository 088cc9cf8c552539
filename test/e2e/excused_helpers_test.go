package e2e

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// What the invariant checker excuses, read from the lab's logs and spec:
// the faults a test's own wipes explain, and etcd 3.5's learner refusals.

// purgeCrashes are the fatal exits of etcd's purge loop in the nodes' etcd
// logs that a wipe by this test explains: a member whose data dir the test
// wiped while it ran ends itself at the loop's next tick (CI stop 34: 0.4 s
// after the wipe, before the agent acted, with an API write in flight
// through it). Any other purge fatal is not excused.
func purgeCrashes(t *testing.T, l *lab.Lab) []time.Time {
	t.Helper()
	var fatals, wipes []invariant.NodeEvent
	for _, n := range l.Spec.Nodes {
		path := filepath.Join(n.LogsDir, "etcd-"+n.Name+"_etcd.log")
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		for _, e := range logEntries(t, path, "failed to purge ") {
			if e["level"] == "fatal" {
				fatals = append(fatals, invariant.NodeEvent{Node: n.Name, At: entryTime(t, e)})
			}
		}
	}
	for _, w := range l.Wipes() {
		if w.Pod == "" {
			wipes = append(wipes, invariant.NodeEvent{Node: w.Node, At: w.At})
		}
	}
	excused := invariant.WipedPurgeCrashes(wipes, fatals)
	if len(excused) < len(fatals) {
		t.Logf("purge fatals not explained by a wipe of this test (not excused): %v", fatals)
	}
	return excused
}

// podPurgeCrashes is purgeCrashes for the hosted members of namespace ns:
// the purge fatals in their pods' etcd logs (logs/<ns>_<pod>_etcd.log on
// any node) that a WipePodData of that same pod explains (CI stop 47:
// clusters-b/etcd-2 ended 3 ms after a write through it failed).
func podPurgeCrashes(t *testing.T, l *lab.Lab, ns string) []time.Time {
	t.Helper()
	var fatals, wipes []invariant.NodeEvent
	for _, n := range l.Spec.Nodes {
		paths, err := filepath.Glob(filepath.Join(n.LogsDir, ns+"_*_etcd.log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			pod := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), ns+"_"), "_etcd.log")
			for _, e := range logEntries(t, path, "failed to purge ") {
				if e["level"] == "fatal" {
					fatals = append(fatals, invariant.NodeEvent{Node: ns + "/" + pod, At: entryTime(t, e)})
				}
			}
		}
	}
	for _, w := range l.Wipes() {
		if w.Pod != "" {
			wipes = append(wipes, invariant.NodeEvent{Node: w.Pod, At: w.At})
		}
	}
	excused := invariant.WipedPurgeCrashes(wipes, fatals)
	if len(excused) < len(fatals) {
		t.Logf("%s: purge fatals not explained by a pod wipe of this test (not excused): %v", ns, fatals)
	}
	return excused
}
