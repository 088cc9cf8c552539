package gate

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
)

func TestTheGateStartsEtcdWithTheRejoinFlagsJudged(t *testing.T) {
	dir := t.TempDir()
	c := Config{StateDir: dir, Log: zap.NewNop()}
	argv := []string{"/bin/etcd", "--name=etcd-1", "--initial-cluster=etcd-0=http://a:2380,etcd-1=http://b:2380,etcd-2=http://c:2380", "--initial-cluster-state=new"}
	sf := memberruntime.StartFlags{InitialCluster: "etcd-0=http://a:2380,etcd-1=http://b:2380", InitialClusterState: "existing"}
	got, _, err := withStartFlags(c, argv, nil, sf)
	want := []string{"/bin/etcd", "--name=etcd-1", "--initial-cluster=etcd-0=http://a:2380,etcd-1=http://b:2380", "--initial-cluster-state=existing"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q %v, want %q", got, err, want)
	}
	// The flags set are the ones judged, whatever the file says by then.
	if err := os.WriteFile(filepath.Join(dir, memberruntime.StartFile), []byte(`{"initialCluster":"x=http://x:2380","initialClusterState":"existing"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, err = withStartFlags(c, argv, nil, sf); err != nil || !slices.Equal(got, want) {
		t.Fatalf("with another file in place: got %q %v, want %q", got, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, memberruntime.StartFile), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := memberruntime.ReadStartFlags(dir); ok || err == nil {
		t.Fatal("an unreadable start file must not count as flags")
	}
}

// A pass that needs the start file's flags never falls back to etcd's own
// bootstrap flags when no flags were judged; other passes run etcd as it is.
func TestAPassNeedingStartFlagsNeverRunsTheBootstrapFlags(t *testing.T) {
	c := Config{StateDir: t.TempDir(), Log: zap.NewNop()}
	argv := []string{"/bin/etcd", "--name=etcd-1", "--initial-cluster=etcd-1=http://b:2380", "--initial-cluster-state=new"}
	boot := bootstrapFlags{bootstrap: true, peers: []string{"http://b:2380"}}
	for _, r := range []plan.Reason{plan.GatePrepared, plan.GateLearnerStartFlags} {
		if _, _, err := gateCommandLine(c, plan.GateVerdict{Pass: true, Reason: r}, nil, boot, argv, nil); err == nil {
			t.Errorf("%s without flags judged: etcd would run its bootstrap flags", r)
		}
	}
	got, _, err := gateCommandLine(c, plan.GateVerdict{Pass: true, Reason: plan.GatePrepared}, nil, bootstrapFlags{}, argv[:2], nil)
	if err != nil || !slices.Equal(got, argv[:2]) {
		t.Errorf("a prepared learner whose own flags join: got %q %v", got, err)
	}
	sf := &memberruntime.StartFlags{InitialCluster: "etcd-1=http://b:2380", InitialClusterState: "existing"}
	if got, _, err := gateCommandLine(c, plan.GateVerdict{Pass: true, Reason: plan.GateNeverSeen}, sf, boot, argv, nil); err != nil || !slices.Equal(got, argv) {
		t.Errorf("a first start with a start file around: got %q %v, want etcd's own flags", got, err)
	}
}
