package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"go.uber.org/zap"
)

func TestTheGateStartsEtcdWithThePodRuntimesRejoinFlags(t *testing.T) {
	dir := t.TempDir()
	c := Config{StateDir: dir, Log: zap.NewNop()}
	argv := []string{"/bin/etcd", "--name=etcd-1", "--initial-cluster=etcd-0=http://a:2380,etcd-1=http://b:2380,etcd-2=http://c:2380", "--initial-cluster-state=new"}
	got, _, err := withStartFlags(c, argv, nil)
	if err != nil || !slices.Equal(got, argv) {
		t.Fatalf("no start file: %q %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, memberruntime.StartFile),
		[]byte(`{"initialCluster":"etcd-0=http://a:2380,etcd-1=http://b:2380","initialClusterState":"existing"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err = withStartFlags(c, argv, nil)
	want := []string{"/bin/etcd", "--name=etcd-1", "--initial-cluster=etcd-0=http://a:2380,etcd-1=http://b:2380", "--initial-cluster-state=existing"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q %v, want %q", got, err, want)
	}
	if err := os.WriteFile(filepath.Join(dir, memberruntime.StartFile), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := withStartFlags(c, argv, nil); err == nil {
		t.Fatal("an unreadable start file must keep etcd from starting")
	}
}
