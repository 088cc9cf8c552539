package netprobe

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return testCA{cert, key, pool}
}

func (ca testCA) issue(t *testing.T, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "etcd"}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsServer accepts TLS connections with cfg and completes the handshake
// (what an etcd member's client listener does before gRPC).
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
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
			go func() { _ = c.(*tls.Conn).Handshake(); time.Sleep(time.Second); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// statusErr is what the probe's handshake check gets.
func statusErr(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	return Handshake("https://"+addr, cfg, 2*time.Second)
}

// A member whose serving cert
// comes from a CA the agent does not trust yet (mid rotation), and a member
// that refuses the agent's client cert, are trust failures; a member that
// is not there, or that does not finish a handshake, is not.
func TestTrustFailuresAreToldFromAMemberThatIsNotThere(t *testing.T) {
	oldCA, newCA := newTestCA(t, "old"), newTestCA(t, "new")
	rotated := tlsServer(t, &tls.Config{Certificates: []tls.Certificate{newCA.issue(t, x509.ExtKeyUsageServerAuth)}})
	err := statusErr(t, rotated, &tls.Config{RootCAs: oldCA.pool})
	if !TrustFailure(err) {
		t.Fatalf("serving cert from an unknown CA: %v, want a trust failure", err)
	}
	strict := tlsServer(t, &tls.Config{Certificates: []tls.Certificate{oldCA.issue(t, x509.ExtKeyUsageServerAuth)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: newCA.pool})
	err = statusErr(t, strict, &tls.Config{RootCAs: oldCA.pool, Certificates: []tls.Certificate{oldCA.issue(t, x509.ExtKeyUsageClientAuth)}})
	if !TrustFailure(err) {
		t.Fatalf("client cert refused: %v, want a trust failure", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := ln.Addr().String()
	ln.Close()
	if err := statusErr(t, gone, &tls.Config{RootCAs: oldCA.pool}); err == nil || TrustFailure(err) {
		t.Fatalf("nothing listening: %v, want an error that is no trust failure", err)
	}
	silent, _ := net.Listen("tcp", "127.0.0.1:0") // accepts, never handshakes
	t.Cleanup(func() { silent.Close() })
	if err := statusErr(t, silent.Addr().String(), &tls.Config{RootCAs: oldCA.pool}); err == nil || TrustFailure(err) {
		t.Fatalf("no handshake: %v, want an error that is no trust failure", err)
	}
	if TrustFailure(errors.New("context deadline exceeded")) || TrustFailure(nil) {
		t.Fatal("a timeout or no error is no trust failure")
	}
}
