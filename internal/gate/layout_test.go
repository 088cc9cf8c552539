package gate

import (
	"os/exec"
	"strings"
	"testing"
)

// The gate stands on its own (docs/design.md §12): it runs in etcd's
// container, before etcd, and reads its own Config; it never reaches the
// agent that wires it, a controller, the healer or the lab.
func TestTheGateStandsOnItsOwn(t *testing.T) {
	const module = "github.com/etcd-agent/etcd-agent/internal/"
	deps, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, d := range strings.Fields(string(deps)) {
		switch {
		case d == module+"agent", d == module+"heal", strings.HasPrefix(d, module+"lab"), strings.HasPrefix(d, module+"controller/"):
			t.Errorf("the gate reaches %s", d)
		case d == module+"plan":
			seen++ // it decides through plan.DecideGate
		}
	}
	if seen == 0 {
		t.Error("the gate does not import plan: its decisions are not DecideGate's")
	}
}
