package watchdog

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/tlstest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A local member whose serving cert the agent cannot verify (its CA rotated
// before the agent's bundle) is observed as a TLS trust failure, and the
// state tracker never judges it lost; one that is simply not there is not
// a trust failure.
func TestAMemberWhoseCertTheAgentCannotVerifyIsATrustFailureNotADownMember(t *testing.T) {
	rotated, old := tlstest.NewCA(t, "new"), tlstest.NewCA(t, "old")
	addr := tlstest.Server(t, &tls.Config{Certificates: []tls.Certificate{rotated.Issue(t, x509.ExtKeyUsageServerAuth)}})
	c := &clients{tls: &tls.Config{RootCAs: old.Pool}, timeout: time.Second, byURL: map[string]*clientv3.Client{}}
	defer c.close()
	m := observation.Member{ID: 1, ClientURLs: []string{"https://" + addr}}
	c.probe(context.Background(), &m, 0)
	if m.Serving || !m.AuthFailed {
		t.Fatalf("member with an unverifiable cert: serving %v authFailed %v (%s), want a trust failure", m.Serving, m.AuthFailed, m.ProbeError)
	}
	var tr memberstate.Tracker
	for at := time.Duration(0); at < 5*time.Minute; at += 10 * time.Second {
		s := memberstate.Sample{At: time.Unix(0, 0).Add(at), Serving: m.Serving, AuthFailed: m.AuthFailed, DataDir: "in-use",
			HealthyVoters: 2, Voters: 3, HasLeader: true, InMemberList: true}
		if v := tr.Observe(s, memberstate.Config{GracePeriod: time.Minute}); v.State == memberstate.Lost {
			t.Fatalf("at %s: lost (%s)", at, v.Detail)
		}
	}
	// A member that accepts connections and never handshakes (an etcd
	// starting): past the TCP pre-check, no trust failure.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	gone := silent.Addr().String()
	m = observation.Member{ID: 1, ClientURLs: []string{"https://" + gone}}
	c.probe(context.Background(), &m, 0)
	if m.Serving || m.AuthFailed {
		t.Fatalf("member that never handshakes: serving %v authFailed %v (%s), want neither", m.Serving, m.AuthFailed, m.ProbeError)
	}
}
