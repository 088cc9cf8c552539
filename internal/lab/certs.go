package lab

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// apiserverPKI is what the lab's kube-apiserver needs: a CA, a serving cert
// for 127.0.0.1, and a service-account signing key. Generated fresh per lab.
type apiserverPKI struct {
	CAFile, CertFile, KeyFile, SAKeyFile, SAPubFile string
	CAPEM                                           []byte
}

func writePKI(dir string) (apiserverPKI, error) {
	p := apiserverPKI{
		CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "apiserver.crt"),
		KeyFile: filepath.Join(dir, "apiserver.key"), SAKeyFile: filepath.Join(dir, "sa.key"),
		SAPubFile: filepath.Join(dir, "sa.pub"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	ca, err := newCA("etcd-agent-lab-ca")
	if err != nil {
		return p, err
	}
	serving, err := ca.issue("kube-apiserver", []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		// and the `kubernetes` Service's ClusterIP, which a real node's
		// in-cluster clients dial (realnode.go).
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(realNodeServiceIP)}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth})
	if err != nil {
		return p, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	p.CAPEM = ca.certPEM
	files := map[string][]byte{
		p.CAFile:    p.CAPEM,
		p.CertFile:  serving.certPEM,
		p.KeyFile:   serving.keyPEM,
		p.SAKeyFile: mustECKeyPEM(saKey),
		p.SAPubFile: mustPubPEM(&saKey.PublicKey),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return p, err
		}
	}
	return p, nil
}

// certAuthority is a lab CA (P-256, ten years), generated fresh per lab.
type certAuthority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	serial  int64
}

// issued is a cert and its key, PEM-encoded.
type issued struct{ certPEM, keyPEM []byte }

func newCA(name string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &certAuthority{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}, nil
}

// issue signs a new key's cert for cn with the given SANs and usages.
func (ca *certAuthority) issue(cn string, dns []string, ips []net.IP, usage []x509.ExtKeyUsage) (issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issued{}, err
	}
	ca.serial++
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, DNSNames: dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return issued{}, err
	}
	return issued{certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM: mustECKeyPEM(key)}, nil
}

func mustECKeyPEM(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // only fails for unsupported curves; P-256 is supported
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func mustPubPEM(k *ecdsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}
