package main

import (
	"slices"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// --etcd-version picks every member's binary, --etcd-versions node by node.
func TestEtcdVersionFlags(t *testing.T) {
	o := lab.Options{BinDir: "/b", Nodes: 3}
	if err := etcdVersionFlags(&o, "3.5", []string{"3.5", " 3.6", "3.7"}); err != nil {
		t.Fatal(err)
	}
	if o.EtcdBinary != "/b/etcd-3.5" || !slices.Equal(o.EtcdBinaries, []string{"/b/etcd-3.5", "/b/etcd", "/b/etcd-3.7"}) {
		t.Fatalf("binary %q, per node %q", o.EtcdBinary, o.EtcdBinaries)
	}
	for _, c := range []struct {
		binary, version string
		perNode         []string
	}{
		{"/x/etcd", "3.6", nil},                        // two ways to say one thing
		{"", "3.4", nil},                               // not built
		{"", "", []string{"3.5", "3.5", "3.5", "3.5"}}, // more than --nodes
		{"", "", []string{"3.5", "latest"}},
	} {
		o := lab.Options{BinDir: "/b", Nodes: 3, EtcdBinary: c.binary}
		if err := etcdVersionFlags(&o, c.version, c.perNode); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
