package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/runbook"
)

// The docs whose marked shell blocks (```sh runbook=<procedure>) are
// manual procedures the tests run as written.
var runbookDocs = []string{"docs/recovery.md", "docs/management-nodes.md", "docs/runbooks/README.md", "docs/runbooks/Etcd*.md"}

// procedure is one marked procedure made runnable on a lab node: the
// doc's example values and node paths replaced by the lab's.
type procedure struct {
	name  string
	steps []runbook.Step
	// subst replaces, in order, the doc's example values by the lab's;
	// every one must occur in the procedure (a doc that drifted fails the
	// test). paths replaces the kubeadm paths the docs use, where used.
	subst, paths []string
	// root is the scratch dir put for /root.
	root string
	// prelude defines what "Reaching etcd" gives an SRE: E, etcdctl on a
	// healthy member with the cluster's TLS files.
	prelude string
}

// markedProcedures parses every procedure marked in runbookDocs.
func markedProcedures(t *testing.T) map[string][]runbook.Step {
	t.Helper()
	var files []string
	for _, f := range runbookDocs {
		matches, err := filepath.Glob(filepath.Join(repoRoot, f))
		if err != nil || len(matches) == 0 {
			t.Fatalf("no doc %s (%v)", f, err)
		}
		files = append(files, matches...)
	}
	all, err := runbook.Parse(files...)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func loadProcedure(t *testing.T, name string) procedure {
	t.Helper()
	steps := markedProcedures(t)[name]
	if len(steps) == 0 {
		t.Fatalf("no step of procedure %q is marked in %v", name, runbookDocs)
	}
	return procedure{name: name, steps: steps}
}

// onNode sets the lab node's paths for the kubeadm paths the docs use, a
// scratch dir for /root, and E with the lab's etcdctl, endpoints and TLS.
func (p *procedure) onNode(t *testing.T, l *lab.Lab, node string, endpoints []string) {
	t.Helper()
	p.onNodeIn(t, l, node, endpoints, t.TempDir())
}

// onNodeIn is onNode with scratch put for /root: a node's second
// procedure finds what its first left there.
func (p *procedure) onNodeIn(t *testing.T, l *lab.Lab, node string, endpoints []string, scratch string) {
	t.Helper()
	n := nodeOf(t, l, node)
	p.root = scratch
	p.paths = append(p.paths,
		"/etc/kubernetes/manifests", n.ManifestsDir,
		"/var/lib/etcd-agent-quarantine", filepath.Join(n.DiskDir, "etcd-agent-quarantine"),
		"/var/lib/etcd-agent/", n.StateDir+"/",
		"/var/lib/etcd", n.DataDir,
		"/root/", scratch+"/")
	// EP=<url> E asks one member, as "Reaching etcd" defines E.
	flags := []string{"--endpoints=${EP:-" + strings.Join(endpoints, ",") + "}", "--dial-timeout=5s", "--command-timeout=15s"}
	if tls := l.Spec.EtcdTLS; tls != nil {
		flags = append(flags, "--cacert="+tls.CAFile, "--cert="+tls.ClientCert, "--key="+tls.ClientKey)
	}
	p.prelude = fmt.Sprintf("export PATH=%s:%s:$PATH\nE() { etcdctl %s \"$@\"; }\n", filepath.Dir(agentBinary), binDir, strings.Join(flags, " ")) +
		agentReach(t, l)
}

// agentReach is the lab's "Reaching the agent": kubectl against the lab's
// API server, and for the node in $NODE, L its agent's log and S
// `etcd-agent status` with its agent's flags (the lab's agents are
// processes: nothing serves kubectl logs or exec).
func agentReach(t *testing.T, l *lab.Lab) string {
	t.Helper()
	var b strings.Builder
	if a := l.Spec.APIServer; a != nil {
		fmt.Fprintf(&b, "export KUBECONFIG=%q\n", a.Kubeconfig)
	}
	var logs, status strings.Builder
	for _, n := range l.Spec.Nodes {
		if n.Worker {
			continue
		}
		args, err := l.StatusArgs(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = fmt.Sprintf("%q", a)
		}
		fmt.Fprintf(&logs, "  %s) cat %q ;;\n", n.Name, agentLog(t, l, n.Name))
		fmt.Fprintf(&status, "  %s) etcd-agent %s \"$@\" ;;\n", n.Name, strings.Join(quoted, " "))
	}
	fmt.Fprintf(&b, "L() { case \"$NODE\" in\n%s  *) echo \"no node $NODE in the lab\" >&2; return 1 ;;\nesac; }\n", logs.String())
	fmt.Fprintf(&b, "S() { case \"$NODE\" in\n%s  *) echo \"no node $NODE in the lab\" >&2; return 1 ;;\nesac; }\n", status.String())
	return b.String()
}

// run runs the procedure's steps in one bash (-e, pipefail), in order,
// bounded; a failure names the step and shows the output.
func (p procedure) run(t *testing.T, d time.Duration) {
	t.Helper()
	start := time.Now()
	if out, err := p.exec(t, d); err != nil {
		t.Fatalf("procedure %s failed after %s (%v); the last step begun is the last '### step' line:\n%s", p.name,
			time.Since(start).Round(time.Millisecond), err, out)
	}
	t.Logf("procedure %s: %d steps ran as written in %s", p.name, len(p.steps), time.Since(start).Round(time.Millisecond))
}

func (p procedure) exec(t *testing.T, d time.Duration) ([]byte, error) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -euo pipefail\n" + p.prelude)
	for _, s := range p.steps {
		fmt.Fprintf(&script, "echo '### step %s'\n%s\n", s.Where(), s.Script)
	}
	text := script.String()
	for i := 0; i+1 < len(p.subst); i += 2 {
		if !strings.Contains(text, p.subst[i]) {
			t.Fatalf("procedure %s no longer contains %q: update the test's values with the doc", p.name, p.subst[i])
		}
	}
	text = strings.NewReplacer(append(p.subst, p.paths...)...).Replace(text)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return exec.CommandContext(ctx, "bash", "-c", text).CombinedOutput()
}

// without returns the procedure with the lines containing cut removed: a
// procedure missing a step must fail by its own checks.
func (p procedure) without(t *testing.T, cut string) procedure {
	t.Helper()
	q, found := p, false
	q.steps = nil
	for _, s := range p.steps {
		var keep []string
		for _, line := range strings.Split(s.Script, "\n") {
			if strings.Contains(line, cut) {
				found = true
				continue
			}
			keep = append(keep, line)
		}
		s.Script = strings.Join(keep, "\n")
		q.steps = append(q.steps, s)
	}
	if !found {
		t.Fatalf("procedure %s has no line with %q", p.name, cut)
	}
	return q
}

// TestManualRejoinRunsAsWritten: the runbooks' manual rejoin
// (docs/runbooks/README.md), run as written against a kubeadm-like lab
// (etcd TLS, the agents not running: the fallback when the agent is the
// problem) on node2, whose db is corrupt and whose etcd crash-loops. The
// procedure's promise: the member serves again under a new ID, every
// member healthy, the same data on all (HashKV), no acknowledged write
// lost, the old data dir kept.
func TestManualRejoinRunsAsWritten(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, EtcdTLS: true})
	before := idsByPeer(mustMembers(t, l))
	ensureNotLeader(t, l, "node2")
	h := startHealVia(t, l, nodeOf(t, l, "node1").ClientURL, nodeOf(t, l, "node3").ClientURL)
	if err := l.StopMember("node2"); err != nil {
		t.Fatal(err)
	}
	if err := l.CorruptDB("node2"); err != nil {
		t.Fatal(err)
	}
	if err := l.StartMember("node2"); err != nil {
		t.Fatal(err)
	}
	h.fault()
	p := loadProcedure(t, "manual-rejoin")
	n2 := nodeOf(t, l, "node2")
	p.subst = []string{"M=cp-2 PEER=https://10.0.0.12:2380", "M=" + n2.Member + " PEER=" + n2.PeerURL}
	p.onNode(t, l, "node2", []string{nodeOf(t, l, "node1").ClientURL})
	p.run(t, 12*time.Minute)

	if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	after := idsByPeer(mustMembers(t, l))
	if p2 := peerOf(t, l, "node2"); after[p2] == 0 || after[p2] == before[p2] {
		t.Fatalf("node2's member: before %x, after %x: want a new member ID", before[p2], after[p2])
	}
	kept, _ := filepath.Glob(filepath.Join(n2.DiskDir, "etcd-agent-quarantine", "etcd-manual-*", "member", "snap", "db"))
	if len(kept) != 1 {
		t.Fatalf("the old data dir kept: %v, want one copy", kept)
	}
	if _, err := os.Stat(n2.EtcdManifest()); err != nil {
		t.Fatalf("node2's manifest: %v", err)
	}
	h.finish(invariantDefaults())
}

// TestStrandedLearnerRemovedByHandAsWritten: recovery.md's by-hand removal
// of a stranded learner, run as written: a learner added for a member that
// never started (its owner gone) blocks every heal (learner-present); the
// procedure finds it, checks it cannot progress, and removes it; the voters
// are untouched.
func TestStrandedLearnerRemovedByHandAsWritten(t *testing.T) {
	l := shared(t)
	cli, err := l.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() }) // after the learner's cleanup below (cleanups run last first)
	before := idsByPeer(mustMembers(t, l))
	var add *clientv3.MemberAddResponse
	// etcd refuses a change until its members have been active a while
	// ("unhealthy cluster", a lab just up): retried.
	eventually(t, 30*time.Second, "add a learner that never starts", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		add, err = cli.MemberAddAsLearner(ctx, []string{"http://127.0.0.254:1"})
		return err
	})
	t.Cleanup(func() { // a failed run leaves the shared lab as it found it
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cli.MemberRemove(ctx, add.Member.ID); err != nil && !strings.Contains(err.Error(), "member not found") {
			t.Errorf("removing the learner %x: %v", add.Member.ID, err)
		}
	})
	p := loadProcedure(t, "stranded-learner")
	p.onNode(t, l, "node1", l.Spec.ClientURLs())
	// Its own checks catch a step left out: without the removal it fails,
	// the learner still there.
	if out, err := p.without(t, `E member remove "$LEARNER"`).exec(t, time.Minute); err == nil {
		t.Fatalf("the procedure without its removal step passed:\n%s", out)
	}
	p.run(t, 3*time.Minute)
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
		t.Fatalf("members after the procedure %v, want the voters before it %v (the learner %x gone)", now, before, add.Member.ID)
	}
	if err := l.WaitHealthy(context.Background(), 3, 60*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestEveryMarkedProcedureIsRunByATest: every procedure marked in the docs
// is loaded by an e2e test (loadProcedure), and every one loaded is still
// marked: a procedure no test runs would rot unseen.
func TestEveryMarkedProcedureIsRunByATest(t *testing.T) {
	all := markedProcedures(t)
	srcs, err := filepath.Glob(filepath.Join(repoRoot, "test", "e2e", "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	loaded := map[string]bool{}
	call := regexp.MustCompile(`loadProcedure\(t, "([a-z0-9-]+)"\)|alert: +"(Etcd[A-Za-z]+)"|byHand\("([a-z0-9-]+)"`)
	for _, f := range srcs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllSubmatch(b, -1) {
			switch {
			case len(m[2]) > 0:
				loaded["check-"+string(m[2])] = true // an alertCheck's
			case len(m[3]) > 0:
				loaded[string(m[3])] = true // a pod procedure's part
			default:
				loaded[string(m[1])] = true
			}
		}
	}
	for name, steps := range all {
		if !loaded[name] {
			t.Errorf("procedure %s (%s) is marked but no test loads it", name, steps[0].Where())
		}
	}
	for name := range loaded {
		if len(all[name]) == 0 {
			t.Errorf("a test loads procedure %s, which no doc marks", name)
		}
	}
	if len(all) < 24 {
		t.Fatalf("%d procedures marked, want at least the 24 the docs had on 2026-12-03", len(all))
	}
}
