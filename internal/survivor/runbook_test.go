package survivor_test

import (
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
	procs, err := runbook.ParseBytes(docs.RunbooksFile, docs.Runbooks)
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	for name, steps := range procs {
		for _, s := range steps {
			texts[name] += s.Script
		}
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
