package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
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
