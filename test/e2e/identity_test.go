package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestWrongIdentityNeverStopsTheServingMember: node2's agent is restarted
// with an identity that matches no member by name and peer URL (a DaemonSet
// env var shared by all nodes, a typo) while node2's etcd serves at the
// agent's client URL. The process there answers as a member the agent did
// not match: rule 7 says ambiguous-identity, and it is never stopped, however
// long it stays "lost" to the agent.
func TestWrongIdentityNeverStopsTheServingMember(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, lab.Options{Nodes: 3, Agents: true})
	waitAgentState(t, l, "node2", "healthy", "ok", 30*time.Second)
	before := idsByPeer(mustMembers(t, l))
	pid, err := l.EtcdPID("node2")
	if err != nil {
		t.Fatal(err)
	}
	n := nodeOf(t, l, "node2")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{n.ClientURL}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	h := startHeal(t, l)
	h.fault()
	if err := l.RestartAgent(ctx, "node2", "--member-name=nodeX", "--peer-urls=http://127.0.0.99:1"); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// The grace is 3 s: watch node2's etcd for five graces after the first
	// refusal; it must keep its PID and keep serving as the same member.
	const window = 15 * time.Second
	var firstRefusal time.Time
	polls := 0
	for firstRefusal.IsZero() || time.Since(firstRefusal) < window {
		if time.Since(restarted) > 60*time.Second {
			t.Fatalf("no ambiguous-identity refusal within 60s of the restart")
		}
		if p, err := l.EtcdPID("node2"); err != nil || p != pid {
			t.Fatalf("node2's etcd was stopped %s after the agent restart: pid %d (was %d), %v",
				time.Since(restarted).Round(time.Millisecond), p, pid, err)
		}
		if err := servesAs(ctx, cli, n.ClientURL, before[n.PeerURL]); err != nil {
			t.Fatalf("node2's member %s after the agent restart: %v", time.Since(restarted).Round(time.Millisecond), err)
		}
		if v, _ := refusals(l, "node2", "ambiguous-identity"); v > 0 && firstRefusal.IsZero() {
			firstRefusal = time.Now()
			t.Logf("first ambiguous-identity refusal %s after the agent restart", firstRefusal.Sub(restarted).Round(time.Millisecond))
		}
		polls++
		time.Sleep(200 * time.Millisecond)
	}
	// Refusals count once per change of reason: "refused on every
	// observation" is the refused-since gauge, unbroken over the window.
	refused, err := refusedFor(l, "node2", "ambiguous-identity")
	s, _, _ := agentState(l, "node2")
	t.Logf("node2 etcd pid %d unchanged and serving over %d polls, %s; refused ambiguous-identity without a break for %s (%v); agent state %s",
		pid, polls, time.Since(restarted).Round(time.Millisecond), refused.Round(time.Second), err, s)
	if err != nil || refused < window {
		t.Fatalf("ambiguous-identity refused without a break for %s (%v), want at least %s: it must hold on every observation of a lost member", refused, err, window)
	}
	for _, m := range []string{"nodeX", "node2"} {
		assertNoRecovery(t, l, "node2", m)
	}
	if now := idsByPeer(mustMembers(t, l)); !sameIDs(now, before) {
		t.Fatalf("membership changed: before %v, now %v", before, now)
	}
	if err := l.RestartAgent(ctx, "node2"); err != nil {
		t.Fatal(err)
	}
	waitAgentState(t, l, "node2", "healthy", "ok", 30*time.Second)
	if err := l.WaitHealthy(ctx, 3, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	h.finish(invariantDefaults())
}

// servesAs: the member at url answers Status as member id with a leader.
func servesAs(ctx context.Context, cli *clientv3.Client, url string, id uint64) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := cli.Status(rctx, url)
	if err != nil {
		return err
	}
	if st.Header.MemberId != id || st.Leader == 0 {
		return fmt.Errorf("answers as %x (want %x), leader %x", st.Header.MemberId, id, st.Leader)
	}
	return nil
}
