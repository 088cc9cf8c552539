package runbook

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The procedures' "its peer port refuses" checks must see a member that
// still listens, also at an IPv6 peer URL (https://[fd00::1]:2380): with
// the brackets kept, bash's /dev/tcp cannot even resolve the host, and a
// check that cannot connect passes; then the survivor is forced while
// another member still runs, and the cluster splits.
func TestPortChecksSeeAPeerThatStillListens(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../../docs/runbooks/*.md")
	procs, err := Parse(append(files, more...)...)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen %s: %v", addr, err)
		}
		defer ln.Close()
		peer := "https://" + ln.Addr().String()
		for name, steps := range procs {
			for _, s := range steps {
				script := portCheck(s.Script)
				if script == "" {
					continue
				}
				checked++
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				out, err := exec.CommandContext(ctx, "bash", "-c", "set -euo pipefail\nPEER="+peer+"\nPEER_A="+peer+"\n"+script).CombinedOutput()
				cancel()
				if err == nil {
					t.Errorf("%s (%s): the peer at %s still listens, and the check passed:\n%s\n%s", name, s.Where(), peer, script, out)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no port check found in the docs")
	}
}

// portCheck is a step's port check alone: the lines that set the host and
// port from the peer URL, and the check itself (not the bounded wait).
func portCheck(script string) string {
	var keep []string
	for _, line := range strings.Split(script, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(l, "HOSTPORT="), strings.HasPrefix(l, "PEER_HOST="):
			keep = append(keep, l)
		case strings.HasPrefix(l, "(! timeout 5 bash -c \"exec 3<>/dev/tcp/"):
			keep = append(keep, l)
			return strings.Join(keep, "\n")
		}
	}
	return ""
}
