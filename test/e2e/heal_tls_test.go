package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// TestHealOverTLS: etcd serves client and peer TLS with client cert auth,
// as kubeadm sets it up, and the agents and their start gates reach it with
// --cacert/--cert/--key (the DaemonSet's ETCD_AGENT_CACERT/CERT/KEY). A
// wiped data dir is healed in seed mode: observation, both snapshot
// streams, the member changes and HashKV all run over TLS, and no member
// sends a raft snapshot.
func TestHealOverTLS(t *testing.T) {
	l := newLab(t, lab.Options{Nodes: 3, Agents: true, EtcdTLS: true})
	n2 := nodeOf(t, l, "node2")
	// The lab's TLS is real: a client that trusts the CA but has no client
	// cert is refused (client cert auth); with the cert it is served.
	ca, err := os.ReadFile(l.Spec.EtcdTLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	noCert := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	if resp, err := noCert.Get(n2.ClientURL + "/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("GET %s/health without a client cert answered %s", n2.ClientURL, resp.Status)
	}
	withCert, err := l.EtcdTLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: withCert}}
	resp, err := hc.Get(n2.ClientURL + "/health")
	if err != nil {
		t.Fatalf("GET %s/health with the lab's client cert: %v", n2.ClientURL, err)
	}
	resp.Body.Close()
	h, j := seededWipeHeal(t, l)
	// The agent says healthy at its first look after the heal, not at the
	// instant the journal closes (CI: "recovering" read 0.5 s after it).
	waitAgentState(t, l, "node2", "healthy", "", 15*time.Second)
	assertQuarantine(t, l, "node2", j)
	h.finish(invariantDefaults())
}
