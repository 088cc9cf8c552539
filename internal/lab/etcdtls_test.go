package lab

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// The lab's etcd PKI: the serving cert is valid for every node IP as
// server and client (peer traffic), the client cert only as a client, both
// under the lab CA.
func TestEtcdPKIServesEveryNodeIPAndAuthenticatesClients(t *testing.T) {
	p, err := writeEtcdPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA file holds no certificate")
	}
	leaf := func(certFile, keyFile string) *x509.Certificate {
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(kp.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	server, client := leaf(p.ServerCert, p.ServerKey), leaf(p.ClientCert, p.ClientKey)
	for _, ip := range []string{"127.0.0.11", "127.0.0.14", "127.0.0.19"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: ip, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving cert for %s: %v", ip, err)
		}
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.20"}); err == nil {
		t.Errorf("serving cert valid for 127.0.0.20, which no lab node has")
	}
	for name, c := range map[string]*x509.Certificate{"server (peer)": server, "client": client} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s cert as a client: %v", name, err)
		}
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Errorf("the client cert is valid for serving")
	}
	cfg, err := p.ClientConfig()
	if err != nil || cfg.RootCAs == nil || cfg.GetClientCertificate == nil {
		t.Fatalf("client TLS config: %v; want the CA and the client cert", err)
	}
	if c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{}); err != nil || len(c.Certificate) == 0 {
		t.Errorf("client TLS config presents no client cert: %v", err)
	} else if got, _ := x509.ParseCertificate(c.Certificate[0]); got == nil || !got.Equal(client) {
		t.Errorf("client TLS config presents another cert than %s", p.ClientCert)
	}
}
