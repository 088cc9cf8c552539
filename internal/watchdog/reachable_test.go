package watchdog

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab/realetcd"
	"github.com/etcd-agent/etcd-agent/internal/observation"
)

// A member that advertises a client URL it does not listen on is probed
// on the next one that answers: a 3.5 learner whose client URLs are set
// aside listens only on its last (issue 40); before, the first URL alone
// decided and such a member read as down.
func TestAMemberIsProbedOnTheFirstClientURLThatAnswers(t *testing.T) {
	p := realetcd.Start(t, realetcd.Binary(t, "etcd"), filepath.Join(t.TempDir(), "data"), "m1")
	c := newClients(nil, 2*time.Second)
	defer c.close()
	closed := freeURL(t)
	m := observation.Member{Name: "m1", ClientURLs: []string{closed, p.Endpoint}}
	c.probe(context.Background(), &m, 0)
	if !m.Serving {
		t.Fatalf("member advertising %v, listening on the second: not serving (%s)", m.ClientURLs, m.ProbeError)
	}
	down := observation.Member{Name: "m2", ClientURLs: []string{closed, freeURL(t)}}
	c.probe(context.Background(), &down, 0)
	if down.Serving || down.ProbeError != "unreachable: connection refused" {
		t.Fatalf("member listening on none of %v: serving %v (%s)", down.ClientURLs, down.Serving, down.ProbeError)
	}
}
