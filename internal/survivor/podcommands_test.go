package survivor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/docs"
	"github.com/etcd-agent/etcd-agent/internal/runbook"
	"github.com/etcd-agent/etcd-agent/internal/survivor"
)

// A StatefulSet member's restore: the shipped procedures (embedded) with
// the survivor's values, E reaching every member; what they cannot say
// safely is refused.
func TestPodCommandsAreTheProceduresWithTheSurvivorsValues(t *testing.T) {
	texts, err := runbook.Scripts(docs.ManagementNodesFile, docs.ManagementNodes)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	members := func() []survivor.Member {
		return []survivor.Member{
			{Name: "etcd-0", ID: 0x8a, Pod: "clusters-b/etcd-0", Node: "mgmt-2", PeerURL: "https://a:2380", ClientURL: "https://a:2379", Source: survivor.FromEtcd, Commit: 7,
				Paths: survivor.Paths{StateDir: "/srv/agent/members/clusters-b_etcd-0"}},
			{Name: "etcd-1", Pod: "clusters-b/etcd-1", PeerURL: "https://b:2380", ClientURL: "https://b:2379", DataDir: "missing", ReportedAt: now},
			{Name: "etcd-2", Pod: "clusters-b/etcd-2", PeerURL: "https://c:2380", ClientURL: "https://c:2379", DataDir: "missing", ReportedAt: now},
		}
	}
	steps, err := survivor.PodCommands(survivor.Choose(members(), false, now), texts, survivor.Etcdctl{CACert: "/ca"})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[0].Procedure != survivor.ProcedurePodForceRequest || steps[0].Node != "mgmt-2" ||
		steps[1].Procedure != survivor.ProcedurePodForceRestart || steps[1].Node != survivor.ShellKubectl {
		t.Fatalf("steps %+v, want the request on the survivor's node, then the restart", steps)
	}
	for i, want := range [][]string{
		{"NS=clusters-b POD=etcd-0 ID=8a", "STATE=/srv/agent/members/clusters-b_etcd-0\n", "--endpoints=${EP:-https://a:2379,https://b:2379,https://c:2379}", "--cacert=/ca"},
		{"NS=clusters-b POD=etcd-0 CLIENT=https://a:2379", "kubectl -n $NS delete pod $POD"},
	} {
		for _, w := range want {
			if !strings.Contains(steps[i].Script, w) {
				t.Errorf("%s lacks %q:\n%s", steps[i].Procedure, w, steps[i].Script)
			}
		}
		for _, example := range []string{"clusters-a", "8e9e05c52164694d", "/var/lib/etcd-agent"} {
			if strings.Contains(steps[i].Script, example) {
				t.Errorf("%s still says %q:\n%s", steps[i].Procedure, example, steps[i].Script)
			}
		}
	}
	for name, edit := range map[string]func([]survivor.Member){
		"no pod":             func(m []survivor.Member) { m[0].Pod = "" },
		"a pod not a name":   func(m []survivor.Member) { m[0].Pod = "clusters-b/etcd-0;rm" },
		"no state dir":       func(m []survivor.Member) { m[0].Paths.StateDir = "" },
		"a state dir quoted": func(m []survivor.Member) { m[0].Paths.StateDir = "/srv/a b" },
		"another pod's dir":  func(m []survivor.Member) { m[0].Paths.StateDir = "/srv/agent/members/clusters-b_etcd-1" },
		"not a member's dir": func(m []survivor.Member) { m[0].Paths.StateDir = "/etc/clusters-b_etcd-0" },
		"no node":            func(m []survivor.Member) { m[0].Node = "" },
		"no member ID":       func(m []survivor.Member) { m[0].ID = 0 },
		"a member unknown":   func(m []survivor.Member) { m[2].DataDir, m[2].ReportedAt = "", time.Time{} },
	} {
		m := members()
		edit(m)
		if steps, err := survivor.PodCommands(survivor.Choose(m, false, now), texts, survivor.Etcdctl{}); err == nil {
			t.Errorf("%s: commands written: %+v", name, steps)
		}
	}
}
