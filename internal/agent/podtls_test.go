package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"go.uber.org/zap"
)

// writeSelfSigned writes a self-signed cert (its own CA) as ca.crt,
// client.crt and client.key in dir, and returns the cert's DER.
func writeSelfSigned(t *testing.T, dir, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ca.crt": certPEM, "client.crt": certPEM,
		"client.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return der
}

func clientTLSIn(dir string) membersource.ClientTLS {
	return membersource.ClientTLS{CACert: membersource.NodeFile{Root: dir, Rel: "ca.crt"}, Cert: membersource.NodeFile{Root: dir, Rel: "client.crt"},
		Key: membersource.NodeFile{Root: dir, Rel: "client.key"}}
}

// Issue 38 (TLS on, StatefulSet members): a heal deletes the member's pod,
// and its Secret volume's files move with the new pod's UID. The agent's
// handshakes go on with the cert last read while the new pod's files are
// not there yet, and use the new pod's once they are.
func TestAPodMembersClientCertFollowsItsPodsSecretVolume(t *testing.T) {
	root := t.TempDir()
	oldPod, newPod := filepath.Join(root, "uid-1"), filepath.Join(root, "uid-2")
	first := writeSelfSigned(t, oldPod, "first")
	cur := membersource.PodMember{ClientTLS: clientTLSIn(oldPod)}
	cfg, err := podClientTLS(cur.ClientTLS, func() membersource.PodMember { return cur }, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.VerifyConnection == nil || cfg.GetClientCertificate == nil {
		t.Fatalf("config %+v: want the gate's CA and client cert", cfg)
	}
	leaf := func() []byte {
		t.Helper()
		c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil || len(c.Certificate) == 0 {
			t.Fatalf("client cert: %v", err)
		}
		return c.Certificate[0]
	}
	if string(leaf()) != string(first) {
		t.Fatal("not the gate's cert")
	}
	if err := os.RemoveAll(oldPod); err != nil { // the old pod deleted, the new one's Secret not written yet
		t.Fatal(err)
	}
	cur = membersource.PodMember{ClientTLS: clientTLSIn(newPod)}
	if string(leaf()) != string(first) {
		t.Fatal("the cert last read was not kept while the pod's files moved")
	}
	second := writeSelfSigned(t, newPod, "second")
	if string(leaf()) != string(second) {
		t.Fatal("the new pod's cert was not used")
	}
}

// A pod whose gate has no client cert is reached with the agent's own
// flags; one with --cert but no --key is not served.
func TestAPodMemberWithoutAGateCertUsesTheAgentsFlags(t *testing.T) {
	none := func() membersource.PodMember { return membersource.PodMember{} }
	if cfg, err := podClientTLS(membersource.ClientTLS{}, none, zap.NewNop()); cfg != nil || err != nil {
		t.Fatalf("config %v, err %v: want none (the agent's flags)", cfg, err)
	}
	if _, err := podClientTLS(membersource.ClientTLS{Cert: membersource.NodeFile{Root: "/x", Rel: "client.crt"}}, none, zap.NewNop()); err == nil {
		t.Fatal("a --cert without --key accepted")
	}
}
