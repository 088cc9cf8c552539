package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStopRightAfterStartLeavesNoProcess (review of issue 13): a pod
// deleted while its sync is still starting it is stopped at once. Before
// start set the runner's cancel synchronously, that stop found nothing to
// cancel and returned, and the container started afterwards, untracked,
// holding the pod's IP.
func TestStopRightAfterStartLeavesNoProcess(t *testing.T) {
	dir := t.TempDir()
	s, err := New(Config{ManifestsDir: filepath.Join(dir, "m"), LogsDir: filepath.Join(dir, "l"), StateFile: filepath.Join(dir, "s.json"), StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The shell stays (no exec) so that its command line carries dir.
	for i := range 20 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Command: []string{"/bin/sh", "-c", "sleep 300; :", dir}}}}}
		pr := newPodRunner(s, "p.yaml", "h", p)
		pr.start(context.Background())
		pr.stopWithin(0)
		// Anything the runner would still start shows up within moments.
		time.Sleep(100 * time.Millisecond)
		if pids := processesMentioning(dir); len(pids) > 0 {
			t.Fatalf("round %d: a container of a stopped pod runs: pids %v", i, pids)
		}
	}
}

func processesMentioning(s string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), s) && e.Name() != "self" {
			if e.Name() != strconv.Itoa(os.Getpid()) {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

func TestExitCodeIsStatusOr128PlusSignal(t *testing.T) {
	for cmd, want := range map[string]int{"exit 3": 3, "kill -KILL $$": 137, "kill -TERM $$": 143, "true": 0} {
		c := exec.Command("/bin/sh", "-c", cmd)
		_ = c.Run()
		if got := exitCode(c.ProcessState); got != want {
			t.Errorf("%q: exit code %d, want %d", cmd, got, want)
		}
	}
}

func TestPVOnNodeFollowsNodeAffinity(t *testing.T) {
	pv := func(nodes ...string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: nodes}}}}}}}}
	}
	if !pvOnNode(pv("node1"), "node1") || pvOnNode(pv("node1"), "node2") || !pvOnNode(&corev1.PersistentVolume{}, "node2") {
		t.Fatal("node affinity misread")
	}
}
