package plan

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The decision core is pure: it and everything it imports do no I/O of
// their own. Checked on the real import graph (`go list`): the packages
// plan needs, transitively, are the standard library and the agent's pure
// data packages only; none of them imports an I/O package itself (fmt
// pulls os in for Printf; plan and its data packages never call it); and no
// network or process package is reachable at all.
func TestPlanImportsNoIOPackages(t *testing.T) {
	pure := []string{"plan", "observation", "memberstate", "record", "etcdversion"}
	const module = "github.com/etcd-agent/etcd-agent/internal/"
	deps := goList(t, "-deps", "-f", "{{.ImportPath}} {{.Standard}}", "./")
	for _, line := range deps {
		path, std, _ := strings.Cut(line, " ")
		switch {
		case std == "true":
			for _, banned := range []string{"net", "os/exec", "os/signal", "net/http", "crypto/tls", "database/sql"} {
				if path == banned || strings.HasPrefix(path, banned+"/") {
					t.Errorf("plan reaches %s", path)
				}
			}
		case !slices.Contains(pure, strings.TrimPrefix(path, module)):
			t.Errorf("plan reaches %s: only %v (pure data) may be imported", path, pure)
		}
	}
	for _, p := range pure {
		for _, imp := range strings.Fields(strings.Join(goList(t, "-f", "{{join .Imports \" \"}}", "../"+p), " ")) {
			if slices.Contains([]string{"os", "io/fs", "io/ioutil", "path/filepath", "syscall", "io"}, imp) {
				t.Errorf("package %s imports %s: no I/O in the decision core", p, imp)
			}
		}
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
