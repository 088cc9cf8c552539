package controller

import (
	"os/exec"
	"strings"
	"testing"
)

// One package per controller (docs/design.md §3): a controller reads its
// own Config and never reaches into the agent (which wires it) or into
// another controller; what they share lives below them (podfacts, plan,
// heal, ...). Checked on the real import graph.
func TestEachControllerStandsOnItsOwn(t *testing.T) {
	const module = "github.com/etcd-agent/etcd-agent/internal/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	controllers, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	own := strings.Fields(string(controllers))
	if len(own) < 3 {
		t.Fatalf("controllers %v: want steward, manifestkeeper and mover at least", own)
	}
	for _, c := range own {
		deps, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", c).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", c, err)
		}
		for _, d := range strings.Fields(string(deps)) {
			switch {
			case d == module+"agent" || strings.HasPrefix(d, module+"lab"):
				t.Errorf("%s reaches %s", c, d)
			case strings.HasPrefix(d, module+"controller/") && d != c:
				t.Errorf("%s reaches another controller, %s", c, d)
			}
		}
	}
	if !strings.Contains(string(out), module+"podfacts") {
		t.Errorf("no controller reads pod facts through internal/podfacts")
	}
}
