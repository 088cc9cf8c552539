package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"github.com/etcd-agent/etcd-agent/internal/watchdog"
	"github.com/etcd-agent/etcd-agent/metrics"
)

func TestAPodIsStoppedOnlyWhenItsGateReadsThisAgentsStateDir(t *testing.T) {
	dir := MemberStateDir("/var/lib/etcd-agent", "clusters-a", "etcd-0")
	if dir != "/var/lib/etcd-agent/members/clusters-a_etcd-0" {
		t.Fatal(dir)
	}
	for _, tc := range []struct {
		name string
		pm   membersource.PodMember
		want string // "" = may stop
	}{
		{"gated on this state dir", membersource.PodMember{GateWrapped: true, GateStateDir: dir + "/", GateMemberSource: MemberSourcePods}, ""},
		{"gate without --member-source=pods", membersource.PodMember{GateWrapped: true, GateStateDir: dir}, "lacks --member-source=pods"},
		{"not gate-wrapped", membersource.PodMember{}, "does not run etcd through the start gate"},
		{"gate without --state-dir", membersource.PodMember{GateWrapped: true}, "no --state-dir"},
		{"gate reading another folder", membersource.PodMember{GateWrapped: true, GateStateDir: "/var/lib/etcd-agent"}, "not this agent's"},
	} {
		err := gatedOn(tc.pm, dir)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestPodMemberSourceNeedsANodeAndAValidSelector(t *testing.T) {
	c := Config{PollInterval: time.Second, StateDir: t.TempDir(), QuarantineKeep: 1}
	c.MemberSource = MemberSourcePods
	c.PodSelector = "app=etcd"
	c.NodeName = ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--node-name") {
		t.Fatalf("no node: %v", err)
	}
	c.NodeName, c.PodSelector = "node1", "app in (("
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--pod-selector") {
		t.Fatalf("bad selector: %v", err)
	}
	c.PodSelector = "app=etcd"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.PeerProbeInterval = -time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--peer-probe-interval") {
		t.Fatalf("negative --peer-probe-interval: %v", err)
	}
	c.PeerProbeInterval = 0
	c.MemberSource = "files"
	if err := c.Validate(); err == nil {
		t.Fatal("unknown member source accepted")
	}
}

// A pod member whose worker ends (its pod moved to another node, or is
// gone) leaves no series behind: a stale quorum margin of 0, a "lost" state
// or a refusal would keep the alerts on it firing on this node. Its
// cluster's other members keep theirs.
func TestAStoppedPodMemberTakesItsSeriesWithIt(t *testing.T) {
	m := metrics.New()
	p := &podMembers{m: m, workers: map[string]*podWorker{}, readRV: map[string]string{}}
	for _, name := range []string{"etcd-0", "etcd-1"} {
		done := make(chan struct{})
		close(done)
		p.workers["clusters-a/"+name] = &podWorker{member: membersource.PodMember{Namespace: "clusters-a", Name: name, Cluster: "clusters-a/etcd",
			Identity: watchdog.Identity{Name: name}},
			cancel: func() {}, done: done}
		cm := m.ForCluster("clusters-a/etcd")
		cm.Init(name, []string{"majority-lost"}, []string{"stopped"})
		cm.QuorumMargin.WithLabelValues(name).Set(0)
		cm.MemberState.WithLabelValues(name, "lost").Set(1)
	}
	p.stop("clusters-a/etcd-0")
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "member" {
					left[l.GetValue()]++
				}
			}
		}
	}
	if left["etcd-0"] != 0 || left["etcd-1"] == 0 {
		t.Fatalf("series left by member after etcd-0's worker stopped: %v; want none of etcd-0's, etcd-1's kept", left)
	}
}
