package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// EtcdTLS is the lab's etcd PKI (Options.EtcdTLS), laid out like kubeadm's
// /etc/kubernetes/pki/etcd: a CA; a serving cert (server and client auth)
// for every lab IP, which the members use for client and peer traffic; and
// a client cert for everyone who talks to etcd (agents, kube-apiserver,
// tests), like kubeadm's healthcheck-client and apiserver-etcd-client.
type EtcdTLS struct {
	Dir        string `json:"dir"`
	CAFile     string `json:"caFile"`
	ServerCert string `json:"serverCert"`
	ServerKey  string `json:"serverKey"`
	ClientCert string `json:"clientCert"`
	ClientKey  string `json:"clientKey"`
}

// writeEtcdPKI generates the etcd PKI in dir.
// extraIPs are more serving IPs (a real node's).
func writeEtcdPKI(dir string, extraIPs ...string) (*EtcdTLS, error) {
	t := &EtcdTLS{Dir: dir, CAFile: filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := newCA("etcd-agent-lab-etcd-ca")
	if err != nil {
		return nil, err
	}
	// Every IP newNode can hand out (127.0.0.11-19), and loopback.
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	for i := 1; i <= 9; i++ {
		ips = append(ips, net.ParseIP(fmt.Sprintf("127.0.0.%d", 10+i)))
	}
	for _, ip := range extraIPs {
		ips = append(ips, net.ParseIP(ip))
	}
	server, err := ca.issue("etcd-server", []string{"localhost"}, ips,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, err
	}
	client, err := ca.issue("etcd-client", nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{t.CAFile: ca.certPEM, t.ServerCert: server.certPEM, t.ServerKey: server.keyPEM,
		t.ClientCert: client.certPEM, t.ClientKey: client.keyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// memberFlags are etcd's TLS flags: client and peer TLS with client
// certificate auth on both, as kubeadm configures it.
func (t *EtcdTLS) memberFlags() []string {
	return []string{
		"--cert-file=" + t.ServerCert, "--key-file=" + t.ServerKey, "--trusted-ca-file=" + t.CAFile, "--client-cert-auth=true",
		"--peer-cert-file=" + t.ServerCert, "--peer-key-file=" + t.ServerKey, "--peer-trusted-ca-file=" + t.CAFile, "--peer-client-cert-auth=true",
	}
}

// agentFlags are the etcd-agent flags for the client cert.
func (t *EtcdTLS) agentFlags() []string {
	return []string{"--cacert=" + t.CAFile, "--cert=" + t.ClientCert, "--key=" + t.ClientKey}
}

// ClientConfig is the client TLS config for etcd.
func (t *EtcdTLS) ClientConfig() (*tls.Config, error) {
	return transport.TLSInfo{TrustedCAFile: t.CAFile, CertFile: t.ClientCert, KeyFile: t.ClientKey}.ClientConfig()
}

// EtcdTLSConfig is the client TLS config for the lab's etcd, nil when its
// members serve plain HTTP.
func (l *Lab) EtcdTLSConfig() (*tls.Config, error) {
	if l.Spec.EtcdTLS == nil {
		return nil, nil
	}
	return l.Spec.EtcdTLS.ClientConfig()
}

// scrapeEtcd reads node n's etcd /metrics (on its client URL, with the
// client cert when the lab uses TLS).
func (l *Lab) scrapeEtcd(ctx context.Context, n Node) (Metrics, error) {
	cfg, err := l.EtcdTLSConfig()
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return Scrape(ctx, n.ClientURL+"/metrics")
	}
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer hc.CloseIdleConnections()
	return scrapeWith(ctx, hc, n.ClientURL+"/metrics")
}
