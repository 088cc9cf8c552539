package e2e

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/heal"
	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
)

// alertCheck is an alert runbook's marked "Check" block, run with node's
// paths while the alert's condition holds in the lab; want are what the
// runbook says the output shows (regexps), so a check that runs but no
// longer shows it fails too.
type alertCheck struct {
	alert string
	node  string // put for the doc's cp-2 or cp-3
	want  []string
}

func (c alertCheck) run(t *testing.T, l *lab.Lab) {
	t.Helper()
	p := loadProcedure(t, "check-"+c.alert)
	p.onNode(t, l, c.node, l.Spec.ClientURLs())
	for _, doc := range []string{"NODE=cp-2 ", "NODE=cp-3 "} {
		if strings.Contains(p.steps[0].Script, doc) {
			p.subst = append(p.subst, doc, "NODE="+c.node+" ")
		}
	}
	start := time.Now()
	out, err := p.exec(t, 2*time.Minute)
	if err != nil {
		t.Fatalf("the check of %s failed (%v):\n%s", c.alert, err, out)
	}
	for _, w := range c.want {
		if !regexp.MustCompile(w).Match(out) {
			t.Fatalf("the check of %s on %s does not show %q; its output:\n%s", c.alert, c.node, w, out)
		}
	}
	t.Logf("check of %s on %s ran as written in %s (%d lines, shows %d things its runbook names)", c.alert, c.node,
		time.Since(start).Round(time.Millisecond), bytes.Count(out, []byte("\n")), len(c.want))
}

// TestAlertChecksRunAsWritten (issue 16): every alert runbook's marked
// check runs in the lab while its alert's condition holds: node2's heal
// held with the Lease after its learner was added (RecoveryStuck,
// StepSlow, LeaseBlocked, QuorumMarginZero, LearnerLagging,
// MembersUnhealthy), node3's data lost meanwhile and its agent refusing
// (MemberLost, RecoveryRefusedQuorum, RecoveryBlocked), then both healed
// (HashMismatch, RecoveryFailed, NoLeader, StartGateMissing and
// SeedSnapshotCorrupt read the last recovery). The checks only read.
func TestAlertChecksRunAsWritten(t *testing.T) {
	// node3's etcd serves on with its data dir wiped for as long as the
	// checks take: without the purge loop, which would exit it at its next
	// 30 s tick and take the quorum of the two voters with it (CI stop 34:
	// the first check's kubectl timed out).
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdNoPurge: true, Failpoints: []string{heal.HoldAtFailpoint(heal.HoldMemberStart)}})
	release(t, l, "node3", heal.HoldMemberStart) // only node2's heal holds
	h := wipeNode2(t, l)
	waitHold(t, l, "node2", heal.HoldMemberStart)
	if err := l.WipeDataDir("node3"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "node3's agent refuses while node2's heal holds the Lease", func() error {
		if len(logEntries(t, agentLog(t, l, "node3"), "recovery refused")) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	const (
		holder   = `holderIdentity: node2/node2`
		learner  = `\|\s+true\s+\|` // member list -w table: IS LEARNER
		refused  = `RecoveryRefused`
		lost     = `data dir [^ ]+: (missing|empty)`
		decision = `member node2: [A-Z]+ .*\n(.*\n)*decision: `
	)
	for _, c := range []alertCheck{
		{alert: "EtcdAgentRecoveryStuck", node: "node2", want: []string{holder, `etcd-agent.io/phase`, `recovery phase done`, learner}},
		{alert: "EtcdAgentRecoveryStepSlow", node: "node2", want: []string{decision, learner}},
		{alert: "EtcdAgentRecoveryLeaseBlocked", node: "node2", want: []string{holder, `etcd-agent.io/started-at`, `recovery step`, `"phase":`}},
		{alert: "EtcdAgentQuorumMarginZero", node: "node2", want: []string{learner, holder, `RecoveryStarted`, `node3\s+Ready`}},
		{alert: "EtcdAgentLearnerLagging", node: "node2", want: []string{learner, `RAFT INDEX`}},
		{alert: "EtcdAgentMembersUnhealthy", node: "node2", want: []string{learner, `RecoveryStarted`, decision}},
		{alert: "EtcdAgentMemberLost", node: "node3", want: []string{lost, refused}},
		{alert: "EtcdAgentRecoveryRefusedQuorum", node: "node3", want: []string{lost, refused, learner}},
		{alert: "EtcdAgentRecoveryBlocked", node: "node3", want: []string{lost, refused, holder, `--name=node3`}},
	} {
		c.run(t, l)
	}

	release(t, l, "node2", heal.HoldMemberStart)
	h.waitHealed("node2", "node2", 3, 3*time.Minute)
	h.waitHealed("node3", "node3", 3, 3*time.Minute)
	const lastRecovery = `"result":"succeeded"`
	for _, c := range []alertCheck{
		{alert: "EtcdAgentHashMismatch", node: "node2", want: []string{lastRecovery, `HASH`, `No resources found`}},
		{alert: "EtcdAgentRecoveryFailed", node: "node2", want: []string{lastRecovery, `"phase":`, `recovery succeeded`}},
		{alert: "EtcdMemberNoLeader", node: "node2", want: []string{`IS LEADER`, `member node2: HEALTHY`}},
		{alert: "EtcdAgentStartGateMissing", node: "node2", want: []string{`command:\n\s+- \S+etcd-agent\S*\n\s+- gate\n`}},
		{alert: "EtcdAgentSeedSnapshotCorrupt", node: "node2", want: []string{`"rejoinMode": "seed"`, `"seedSource":`, `HASH`}},
	} {
		c.run(t, l)
	}
	h.finish(invariant.Options{})
}
