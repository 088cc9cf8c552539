package survivor_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/docs"
	"github.com/etcd-agent/etcd-agent/internal/runbook"
	"github.com/etcd-agent/etcd-agent/internal/survivor"
)

// The shipped runbook (embedded in the binary) still holds the three
// procedures with the example values the commands replace: a runbook edit
// that drifts fails here, not at 3 a.m.
func TestTheEmbeddedRunbookMakesTheRestoreCommands(t *testing.T) {
	texts, err := runbook.Scripts(docs.RunbooksFile, docs.Runbooks)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p := survivor.Paths{Manifest: "/srv/manifests/etcd.yaml", DataDir: "/srv/etcd", QuarantineDir: "/srv/q"}
	c := survivor.Choose([]survivor.Member{
		{Name: "a", PeerURL: "https://a:2380", ClientURL: "https://a:2379", Source: survivor.FromEtcd, Commit: 7, Paths: p},
		{Name: "b", PeerURL: "https://b:2380", DataDir: "missing", ReportedAt: now, Paths: p},
	}, false, now)
	steps, err := survivor.Commands(c, texts, survivor.Etcdctl{}, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 {
		t.Fatalf("%d steps, want stop, survivor, rejoin", len(steps))
	}
	for _, s := range steps {
		for _, kubeadm := range []string{"/etc/kubernetes/manifests", "/var/lib/etcd", "10.0.0.1"} {
			if strings.Contains(s.Script, kubeadm) {
				t.Errorf("%s on %s still says %q:\n%s", s.Procedure, s.Member, kubeadm, s.Script)
			}
		}
	}
}

// A stop script run as a dry run (DRY_RUN=1, as status --cluster says to
// run each script first) runs its checks and ends before it changes
// anything; a check that does not hold fails it. Run under bash on a
// member's files laid out in a temp dir (a member that never served:
// nothing to ask).
func TestAStopScriptsDryRunChecksAndChangesNothing(t *testing.T) {
	texts, err := runbook.Scripts(docs.RunbooksFile, docs.Runbooks)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	p := survivor.Paths{Manifest: filepath.Join(root, "manifests", "etcd.yaml"), DataDir: filepath.Join(root, "etcd"), QuarantineDir: filepath.Join(root, "q")}
	for _, d := range []string{filepath.Dir(p.Manifest), filepath.Join(p.DataDir, "member")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	c := survivor.Choose([]survivor.Member{
		{Name: "a", PeerURL: "https://a:2380", ClientURL: "https://a:2379", Source: survivor.FromEtcd, Commit: 7, Paths: p},
		{Name: "b", PeerURL: "https://127.0.0.1:1", DataDir: "missing", ReportedAt: now, Paths: p},
	}, false, now)
	steps, err := survivor.Commands(c, texts, survivor.Etcdctl{}, p)
	if err != nil {
		t.Fatal(err)
	}
	stop := steps[0]
	if stop.Procedure != survivor.ProcedureStop || stop.Member != "b" {
		t.Fatalf("first step %s of %s, want %s of b", stop.Procedure, stop.Member, survivor.ProcedureStop)
	}
	dryRun := func(manifest string) (string, error) {
		if err := os.WriteFile(p.Manifest, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		// (/root/ as the e2e writes it: a broken dry run must not
		// park anything on this machine.)
		cmd := exec.Command("bash", "-c", strings.ReplaceAll(stop.Script, "/root/", root+"/"))
		cmd.Env = append(os.Environ(), "DRY_RUN=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := dryRun("spec:\n  containers:\n  - command:\n    - etcd\n    - --data-dir=" + p.DataDir + "\n")
	if err != nil || !strings.Contains(out, "DRY RUN: checks passed") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	for _, f := range []string{p.Manifest, filepath.Join(p.DataDir, "member")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after the dry run: %v", err)
		}
	}
	if _, err := os.Stat(p.QuarantineDir); !os.IsNotExist(err) {
		t.Errorf("the dry run made the quarantine dir (%v)", err)
	}
	// The manifest names another data dir: the check fails, dry run or not.
	if out, err := dryRun("spec:\n  containers:\n  - command:\n    - etcd\n    - --data-dir=/elsewhere\n"); err == nil || strings.Contains(out, "DRY RUN") {
		t.Fatalf("a manifest naming another data dir: the dry run passed (%v)\n%s", err, out)
	}
}

// The survivor's script refuses to run (dry or not) over an earlier run
// of itself that stopped halfway: its manifest parked, or the forced one in
// the kubelet's dir. Run again, it parked the forced manifest over the
// plain one and put it back for good: every later restart of the survivor
// would start over as a one-member cluster (helper-33's review #1). Run
// under bash with an etcdctl on PATH that finds no quorum.
func TestTheSurvivorsScriptRefusesAHalfDoneEarlierRun(t *testing.T) {
	texts, err := runbook.Scripts(docs.RunbooksFile, docs.Runbooks)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	p := survivor.Paths{Manifest: filepath.Join(root, "manifests", "etcd.yaml"), DataDir: filepath.Join(root, "etcd"), QuarantineDir: filepath.Join(root, "q")}
	bin := filepath.Join(root, "bin")
	for _, d := range []string{filepath.Dir(p.Manifest), filepath.Join(p.DataDir, "member"), bin} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// No quorum: etcdctl's health check and status fail.
	if err := os.WriteFile(filepath.Join(bin, "etcdctl"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := survivor.Choose([]survivor.Member{
		{Name: "a", PeerURL: "https://127.0.0.1:1", ClientURL: "https://127.0.0.1:2", Source: survivor.FromDataDir, DataDir: "ok", Commit: 9, ReportedAt: now, Paths: p},
		{Name: "b", PeerURL: "https://127.0.0.1:3", DataDir: "missing", ReportedAt: now, Paths: p},
	}, false, now)
	steps, err := survivor.Commands(c, texts, survivor.Etcdctl{}, p)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(steps, func(s survivor.Step) bool { return s.Procedure == survivor.ProcedureSurvivor })
	if i < 0 {
		t.Fatalf("no %s step in %+v", survivor.ProcedureSurvivor, steps)
	}
	plain := "spec:\n  containers:\n  - command:\n    - etcd\n    - --data-dir=" + p.DataDir + "\n"
	forced := plain + "    - --force-new-cluster\n"
	parked := filepath.Join(root, "etcd.yaml.parked")
	dryRun := func(manifest string, parkedToo bool) (string, error) {
		if err := os.WriteFile(p.Manifest, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(parked)
		if parkedToo {
			if err := os.WriteFile(parked, []byte(plain), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("bash", "-c", strings.ReplaceAll(steps[i].Script, "/root/", root+"/"))
		cmd.Env = append(os.Environ(), "DRY_RUN=1", "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := dryRun(plain, false); err != nil || !strings.Contains(out, "DRY RUN: checks passed") {
		t.Fatalf("a first run's dry run: %v\n%s", err, out)
	}
	for _, c := range []struct {
		name     string
		manifest string
		parked   bool
	}{
		{"stopped in step 4's wait: forced in place, plain parked", forced, true},
		{"the forced manifest in place", forced, false},
		{"a parked manifest beside the plain one", plain, true},
	} {
		if out, err := dryRun(c.manifest, c.parked); err == nil || strings.Contains(out, "DRY RUN") {
			t.Errorf("%s: the checks passed (%v)\n%s", c.name, err, out)
		}
	}
}
