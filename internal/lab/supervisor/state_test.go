package supervisor

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStateFileEndsWithTheNewestStates: containers of a pod change state
// concurrently (etcd and the agent start together on a node); once the
// changes are done, the state file must show every one of them. Before the
// writes were serialized, a writer holding an older snapshot could finish
// last and leave a container "waiting" in the file while it ran (CI: "container
// etcd-agent of etcd-agent.yaml is not running" for a ready agent).
func TestStateFileEndsWithTheNewestStates(t *testing.T) {
	const containers, rounds = 8, 200
	dir := t.TempDir()
	s, err := New(Config{ManifestsDir: filepath.Join(dir, "m"), LogsDir: filepath.Join(dir, "l"), StateFile: filepath.Join(dir, "state.json")})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	for i := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i)})
	}
	pr := newPodRunner(s, "p.yaml", "h", p)
	s.pods["p.yaml"] = pr
	for r := 1; r <= rounds; r++ {
		var wg sync.WaitGroup
		for i := range containers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pr.update(fmt.Sprintf("c%d", i), func(c *ContainerState) { c.State, c.PID = "running", r })
			}()
		}
		wg.Wait()
		st, err := ReadState(s.cfg.StateFile)
		if err != nil {
			t.Fatal(err)
		}
		for i := range containers {
			if c, _ := st.Container("p.yaml", fmt.Sprintf("c%d", i)); c.PID != r {
				t.Fatalf("round %d: the state file shows c%d with pid %d (%s) after every update finished", r, i, c.PID, c.State)
			}
		}
	}
}
