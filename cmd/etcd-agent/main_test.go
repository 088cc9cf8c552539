package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/bench"
)

func execute(args ...string) (string, error) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestBadInputGivesAClearErrorAndNonZeroExit(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "etcd.yaml")
	os.WriteFile(garbage, []byte("kind: [not yaml"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing manifest", []string{"status", "--static-pod-manifest", filepath.Join(dir, "nope.yaml"), "--state-dir", dir}, "not found"},
		{"unparsable manifest", []string{"status", "--static-pod-manifest", garbage, "--state-dir", dir}, "static pod manifest"},
		{"bad output format", []string{"status", "-o", "yaml", "--state-dir", dir}, "bad -o"},
		{"bad log level", []string{"status", "--log-level", "loud", "--state-dir", dir}, "bad --log-level"},
		{"bad duration", []string{"run", "--grace-period", "soon"}, "invalid argument"},
		{"bad member runtime", []string{"run", "--member-runtime", "systemd", "--state-dir", dir}, "--member-runtime"},
		{"exec runtime without commands", []string{"run", "--member-runtime", "exec", "--state-dir", dir}, "--stop-command"},
		{"bad rejoin mode", []string{"run", "--rejoin-mode", "magic", "--state-dir", dir}, "--rejoin-mode"},
		{"the lab is its own binary", []string{"lab", "up"}, "unknown command \"lab\""},
		// The test hooks are failpoints compiled into the tests' agent only.
		{"no hold hook", []string{"run", "--test-hold-at", "lease-acquired", "--state-dir", dir}, "unknown flag: --test-hold-at"},
		{"no crash hook", []string{"run", "--test-crash-before-phase", "removed", "--state-dir", dir}, "unknown flag: --test-crash-before-phase"},
		{"gate with stray arguments", []string{"gate", "--state-dir", dir, "etcd"}, "goes after \"--\""},
		{"gate wrapping a command line without URLs", []string{"gate", "--state-dir", dir, "--", "etcd", "--name=x", "--data-dir=" + dir}, "no --initial-advertise-peer-urls"},
		{"install-gate without --to", []string{"install-gate"}, "--to is required"},
		{"unsupported snapshot store", []string{"run", "--snapshot-store", "gs://bucket", "--state-dir", dir}, "--snapshot-store \"gs://bucket\": want file:///dir or s3://"},
		{"snapshot store keeping nothing", []string{"run", "--snapshot-store", "file:///tmp", "--snapshot-store-keep", "0", "--state-dir", dir}, "--snapshot-store-keep must be >= 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := execute(tc.args...)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out)
			}
			if exitCode(err) == 0 {
				t.Fatalf("exit code 0 for %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestEnvironmentSetsFlagsAndTheCommandLineWins(t *testing.T) {
	t.Setenv("ETCD_AGENT_LOG_LEVEL", "loud")
	if _, err := execute("version"); err != nil {
		t.Fatalf("version does not log: %v", err)
	}
	_, err := execute("status", "--state-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "bad --log-level") {
		t.Fatalf("ETCD_AGENT_LOG_LEVEL was not applied: %v", err)
	}
	t.Setenv("ETCD_AGENT_OUTPUT", "yaml")
	_, err = execute("status", "-o", "json", "--log-level", "info", "--static-pod-manifest", "/nonexistent", "--state-dir", t.TempDir())
	if err == nil || strings.Contains(err.Error(), "bad -o") {
		t.Fatalf("the command line must win over the environment: %v", err)
	}
}

func TestInstallGateCopiesTheBinaryExecutable(t *testing.T) {
	dir := t.TempDir()
	out, err := execute("install-gate", "--to", dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "etcd-agent"))
	if err != nil || fi.Mode().Perm()&0o111 == 0 || fi.Size() == 0 {
		t.Fatalf("installed: %v %v (%s)", fi, err, out)
	}
}

// `lab bench-scale` measures the agent at the product's timings: its
// peer-probe interval is `run`'s default.
func TestBenchScaleMeasuresAtTheProductsPeerProbeInterval(t *testing.T) {
	f := newRunCmd(&globalFlags{}).Flags().Lookup("peer-probe-interval")
	if f == nil {
		t.Fatal("run has no --peer-probe-interval")
	}
	want, err := time.ParseDuration(bench.ProductPeerProbeInterval)
	if err != nil {
		t.Fatal(err)
	}
	if f.DefValue != want.String() {
		t.Fatalf("run's --peer-probe-interval defaults to %s, bench-scale measures at %s", f.DefValue, want)
	}
}

// The product binary links none of the lab (issue 42): not its packages, not
// the dependencies only the lab and the tests use.
func TestTheProductBinaryLinksNoLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps gave %d packages, want the agent's few hundred", len(deps))
	}
	for _, d := range deps {
		// gofail: the test hooks are failpoints, enabled only in the agent
		// the tests build (labtest.BuildAgent).
		for _, labOnly := range []string{"github.com/etcd-agent/etcd-agent/internal/lab", "github.com/anishathalye/porcupine", "sigs.k8s.io/kustomize/", "go.etcd.io/gofail"} {
			if strings.HasPrefix(d, labOnly) {
				t.Errorf("cmd/etcd-agent links %s", d)
			}
		}
	}
}

// The product's go.mod requires no dependency only the lab and the tests use
// (issue 42): the chaos soak's checker lives in test/chaos's module, the
// lab renders kustomizations with kubectl's kustomize.
func TestTheProductGoModHoldsNoLabOnlyDependency(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "module github.com/etcd-agent/etcd-agent\n") {
		t.Fatalf("../../go.mod is not the product's:\n%.200s", b)
	}
	for _, labOnly := range []string{"github.com/anishathalye/porcupine", "sigs.k8s.io/kustomize/", "github.com/seaweedfs/", "golang.org/x/sync", "go.etcd.io/gofail"} {
		if strings.Contains(string(b), labOnly) {
			t.Errorf("the product's go.mod requires %s", labOnly)
		}
	}
}
