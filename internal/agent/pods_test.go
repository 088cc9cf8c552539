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

// A recovery begun on the member's claim must not stop the pod once it was
// re-created on another claim (seen in a parallel e2e run: the old PV's
// data dir quarantined and prepared, the new pod on the restored PV held by
// its gate, the learner stalled, a membership change made for nothing).
func TestAPodOnANewClaimIsNotStoppedForARecoveryBegunOnTheOld(t *testing.T) {
	began := membersource.PodMember{PVC: "data-etcd-2", PVCUID: "uid-1"}
	began.Identity.DataDir = "/mnt/pv/node2-pv-1/data"
	same := began
	if err := sameClaim(began, same); err != nil {
		t.Fatalf("same claim: %v", err)
	}
	newClaim := began
	newClaim.PVCUID = "uid-2"
	newClaim.Identity.DataDir = "/mnt/pv/node2-pv-3/data"
	otherPath := began
	otherPath.Identity.DataDir = "/mnt/pv/node2-pv-3/data"
	otherUID := began
	otherUID.PVCUID = "uid-2"
	for name, got := range map[string]membersource.PodMember{"new claim on another PV": newClaim, "another PV": otherPath, "a new claim": otherUID} {
		err := sameClaim(began, got)
		if err == nil || !strings.Contains(err.Error(), "not stopped") || !strings.Contains(err.Error(), began.Identity.DataDir) {
			t.Errorf("%s: %v, want a refusal naming %s", name, err, began.Identity.DataDir)
		}
	}
}
