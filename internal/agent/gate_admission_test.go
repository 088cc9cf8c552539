package agent

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/gate"
	"github.com/etcd-agent/etcd-agent/internal/pin"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"github.com/etcd-agent/etcd-agent/internal/record"
	"go.uber.org/zap"
)

// closedEndpoint is a loopback address nothing listens on: the cluster
// cannot be asked.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr
}

// From review 4: a pod member's state dir starts empty on every new node
// and claim (the steward moved it, or its PVC was re-created). Its gate,
// seeing no pin, an empty data dir, bootstrap flags and a cluster it cannot
// ask, let etcd bootstrap under the member's old IDs: a member that has
// voted and acknowledged writes coming back with neither. With the pods
// member source the gate lets a first bootstrap through only on the
// agent's word that the cluster's record (which outlives nodes) has never
// seen the cluster serve.
func TestAPodsGateHoldsAFirstBootstrapUntilTheAgentSaysTheClusterNeverServed(t *testing.T) {
	state, data := t.TempDir(), t.TempDir()+"/member"
	peer := closedEndpoint(t)
	argv := []string{"/bin/etcd", "--name=etcd-1", "--data-dir=" + data,
		"--initial-advertise-peer-urls=" + peer, "--advertise-client-urls=" + closedEndpoint(t),
		"--initial-cluster=etcd-0=" + closedEndpoint(t) + ",etcd-1=" + peer + ",etcd-2=" + closedEndpoint(t),
		"--initial-cluster-state=new"}
	c := Config{StateDir: state, MemberSource: MemberSourcePods, Endpoints: []string{closedEndpoint(t)},
		PollInterval: 20 * time.Millisecond, Log: zap.NewNop()}
	look := func() (plan.GateVerdict, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return gate.Wait(ctx, c.GateConfig(), 1500*time.Millisecond, argv)
	}

	v, err := look()
	if err == nil || !strings.Contains(err.Error(), string(plan.GateAwaitingAgent)) {
		t.Fatalf("no word from the agent: the gate must hold (%s), got %+v, %v", plan.GateAwaitingAgent, v, err)
	}

	// The agent read the cluster's record: the cluster has served.
	if err := pin.SaveAdmission(state, record.Admission{ClusterSeen: true, ClusterID: 0xc1, Record: "hc1/etcd-agent-pins-x", CheckedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if v, err := look(); err == nil || !strings.Contains(err.Error(), string(plan.GateClusterUnknown)) {
		t.Fatalf("a cluster that has served: the gate must hold (%s), got %+v, %v", plan.GateClusterUnknown, v, err)
	}

	// An old word that the cluster never served is not enough.
	if err := pin.SaveAdmission(state, record.Admission{Record: "hc1/etcd-agent-pins-x", CheckedAt: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if v, err := look(); err == nil || !strings.Contains(err.Error(), string(plan.GateAwaitingAgent)) {
		t.Fatalf("a stale word: the gate must hold (%s), got %+v, %v", plan.GateAwaitingAgent, v, err)
	}

	// A fresh one: the first start of the cluster may bootstrap.
	if err := pin.SaveAdmission(state, record.Admission{Record: "hc1/etcd-agent-pins-x", CheckedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if v, err := look(); err != nil || v.Reason != plan.GateNeverSeen {
		t.Fatalf("the cluster never served: the gate must pass (%s), got %+v, %v", plan.GateNeverSeen, v, err)
	}
}
