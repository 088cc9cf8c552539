package netprobe

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/tlstest"
)

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
	oldCA, newCA := tlstest.NewCA(t, "old"), tlstest.NewCA(t, "new")
	rotated := tlstest.Server(t, &tls.Config{Certificates: []tls.Certificate{newCA.Issue(t, x509.ExtKeyUsageServerAuth)}})
	err := statusErr(t, rotated, &tls.Config{RootCAs: oldCA.Pool})
	if !TrustFailure(err) {
		t.Fatalf("serving cert from an unknown CA: %v, want a trust failure", err)
	}
	strict := tlstest.Server(t, &tls.Config{Certificates: []tls.Certificate{oldCA.Issue(t, x509.ExtKeyUsageServerAuth)},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: newCA.Pool})
	err = statusErr(t, strict, &tls.Config{RootCAs: oldCA.Pool, Certificates: []tls.Certificate{oldCA.Issue(t, x509.ExtKeyUsageClientAuth)}})
	if !TrustFailure(err) {
		t.Fatalf("client cert refused: %v, want a trust failure", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gone := ln.Addr().String()
	ln.Close()
	if err := statusErr(t, gone, &tls.Config{RootCAs: oldCA.Pool}); err == nil || TrustFailure(err) {
		t.Fatalf("nothing listening: %v, want an error that is no trust failure", err)
	}
	silent, _ := net.Listen("tcp", "127.0.0.1:0") // accepts, never handshakes
	t.Cleanup(func() { silent.Close() })
	if err := statusErr(t, silent.Addr().String(), &tls.Config{RootCAs: oldCA.Pool}); err == nil || TrustFailure(err) {
		t.Fatalf("no handshake: %v, want an error that is no trust failure", err)
	}
	// A member that cannot read its own cert (its files wiped) alerts
	// "internal error": no trust question, it is judged as usual.
	broken := tlstest.Server(t, &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return nil, errors.New("open server.crt: no such file or directory")
	}})
	if err := statusErr(t, broken, &tls.Config{RootCAs: oldCA.Pool}); err == nil || TrustFailure(err) {
		t.Fatalf("server without its cert: %v, want an error that is no trust failure", err)
	}
	if TrustFailure(errors.New("context deadline exceeded")) || TrustFailure(nil) {
		t.Fatal("a timeout or no error is no trust failure")
	}
}
