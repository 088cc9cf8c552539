package gate

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

// TestAForcedStartSetsTheFlagOnceAndSetsTheRequestAside: a pass that
// forces a new cluster runs etcd with --force-new-cluster only after the
// request is set aside (no later start reads it); without the request in
// place, etcd is not started at all.
func TestAForcedStartSetsTheFlagOnceAndSetsTheRequestAside(t *testing.T) {
	dir := t.TempDir()
	c := Config{StateDir: dir, Log: zap.NewNop()}
	argv := []string{"/bin/etcd", "--name=etcd-0", "--data-dir=/var/lib/etcd/data"}
	asked := plan.ForceNewClusterRequest{MemberID: 7, RequestedAt: time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)}
	forced := plan.GateVerdict{Pass: true, Reason: plan.GateForceNewCluster, Until: time.Now().Add(time.Minute), Request: asked}
	if _, _, err := gateCommandLine(c, forced, nil, bootstrapFlags{}, argv, nil); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("forced without the request in place: %v, want not started", err)
	}
	req := filepath.Join(dir, memberruntime.ForceFile)
	if err := os.WriteFile(req, []byte(`{"memberID":"7","requestedAt":"2026-12-07T10:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := memberruntime.ReadForceRequest(dir); !ok || err != nil || r.MemberID != 7 {
		t.Fatalf("read %+v %v %v", r, ok, err)
	}
	got, _, err := gateCommandLine(c, forced, nil, bootstrapFlags{}, argv, nil)
	if want := append(slices.Clone(argv), "--force-new-cluster=true"); err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q %v, want %q", got, err, want)
	}
	if _, err := os.Stat(req); !os.IsNotExist(err) {
		t.Fatalf("the request is still in place after its use: %v", err)
	}
	if used, _ := filepath.Glob(req + ".used-*"); len(used) != 1 {
		t.Fatalf("the used request is not kept beside it: %v", used)
	}
	// Past the arm mark's time the request is set aside as refused, and
	// etcd not forced: the agent keeps the Lease only for a use it sees
	// before then.
	if err := os.WriteFile(req, []byte(`{"memberID":"7","requestedAt":"2026-12-07T10:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	late := forced
	late.Until = time.Now().Add(-time.Millisecond)
	if got, _, err := gateCommandLine(c, late, nil, bootstrapFlags{}, argv, nil); err == nil || !strings.Contains(err.Error(), "after its arm mark's time") {
		t.Fatalf("forced past the mark's time: %q %v", got, err)
	}
	if refused, _ := filepath.Glob(req + ".refused-*"); len(refused) != 1 {
		t.Fatalf("the late request is not set aside as refused: %v", refused)
	}
	if used, _ := filepath.Glob(req + ".used-*"); len(used) != 1 {
		t.Fatalf("used requests: %v, want the first one only", used)
	}
	// A request rewritten after the gate judged it is not the one it
	// forces for: set aside as refused, etcd not forced.
	if err := os.WriteFile(req, []byte(`{"memberID":"7","requestedAt":"2026-12-07T10:05:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, err := gateCommandLine(c, forced, nil, bootstrapFlags{}, argv, nil); err == nil || !strings.Contains(err.Error(), "rewritten") {
		t.Fatalf("forced for a request rewritten since: %q %v", got, err)
	}
	if refused, _ := filepath.Glob(req + ".refused-*"); len(refused) != 2 {
		t.Fatalf("the rewritten request is not set aside as refused: %v", refused)
	}
	// Any other pass runs etcd as it is, a request around or not.
	if err := os.WriteFile(req, []byte(`{"memberID":"7","requestedAt":"2026-12-07T10:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, err := gateCommandLine(c, plan.GateVerdict{Pass: true, Reason: plan.GateDataDirOK}, nil, bootstrapFlags{}, argv, nil); err != nil || !slices.Equal(got, argv) {
		t.Fatalf("a plain pass: got %q %v", got, err)
	}
	setForceRequestAside(dir, "refused", "the cluster has a quorum", zap.NewNop())
	if _, ok, _ := memberruntime.ReadForceRequest(dir); ok {
		t.Fatal("a refused request is still read")
	}
	why, _ := filepath.Glob(req + ".refused-*.why")
	if len(why) != 1 {
		t.Fatalf("the refusal's reason is not kept beside it: %v", why)
	}
	if b, _ := os.ReadFile(why[0]); !strings.Contains(string(b), "has a quorum") {
		t.Fatalf("the reason kept: %q", b)
	}
}
