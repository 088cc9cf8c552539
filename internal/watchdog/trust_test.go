package watchdog

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func selfSignedServer(t *testing.T) (addr string, pool *x509.CertPool) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); time.Sleep(2 * time.Second); c.Close() }()
		}
	}()
	return ln.Addr().String(), pool
}

// A local member whose serving cert the agent cannot verify (its CA rotated
// before the agent's bundle) is observed as a TLS trust failure, and the
// state tracker never judges it lost; one that is simply not there is not
// a trust failure.
func TestAMemberWhoseCertTheAgentCannotVerifyIsATrustFailureNotADownMember(t *testing.T) {
	addr, _ := selfSignedServer(t)
	_, otherPool := selfSignedServer(t)
	c := &clients{tls: &tls.Config{RootCAs: otherPool}, timeout: time.Second, byURL: map[string]*clientv3.Client{}}
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
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := ln.Addr().String()
	ln.Close()
	m = observation.Member{ID: 1, ClientURLs: []string{"https://" + gone}}
	c.probe(context.Background(), &m, 0)
	if m.Serving || m.AuthFailed {
		t.Fatalf("member not there: serving %v authFailed %v (%s), want neither", m.Serving, m.AuthFailed, m.ProbeError)
	}
}
