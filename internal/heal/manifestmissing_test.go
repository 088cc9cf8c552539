package heal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// A lost member whose static-pod manifest was deleted by hand (neither in
// the kubelet's dir nor parked) is not healed: before, the heal took the
// Lease, opened a journal and failed at its stop ("manifest is neither at
// ... nor parked"), again at every backoff, and a removed member's manifest
// would have been brought back by the rejoin's start.
func TestALostMemberWhoseManifestWasDeletedIsNotTouched(t *testing.T) {
	lost := cluster3(memberstate.Lost, 2, 3)
	r := newRig(t, lost, lost, lost, lost, lost, lost)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "manifests", "etcd.yaml")
	r.h.runtime = memberruntime.NewStaticPod(manifest, filepath.Join(dir, "parked"), nil, nil)
	out := r.h.Consider(context.Background(), lost, nil)
	if out.Decision.Action != plan.Refuse || out.Decision.Reason != plan.ReasonManifestMissing {
		t.Fatalf("decision %+v, want refused manifest-missing", out.Decision)
	}
	if _, ok, _ := journal.Load(r.dir, "m1"); ok || r.lease.acquires != 0 || len(r.cluster.calls) != 0 {
		t.Fatalf("something began: journal %v, Lease acquired %d times, cluster calls %v", ok, r.lease.acquires, r.cluster.calls)
	}
	// The manifest back (the agent's checkpoint, or a person): healed as usual.
	if err := os.MkdirAll(filepath.Dir(manifest), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, []byte("kind: Pod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if d := r.h.Plan(context.Background(), lost, nil); d.Reason == plan.ReasonManifestMissing {
		t.Fatalf("with its manifest back: %+v", d)
	}
}
