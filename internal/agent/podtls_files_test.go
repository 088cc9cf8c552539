package agent

// Issue 38: a pod member reached with its start gate's client cert, the
// files read where the kubelet writes them (from the review of h-sts,
// ae52f5b).

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// leaf returns a cert+key PEM signed by ca, for a server on 127.0.0.1 or a client.
func (ca testCA) leaf(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeSwapped(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// serveTLS serves TLS on 127.0.0.1 with the given server cert, requiring a
// client cert from clientCAs; it returns the address.
func serveTLS(t *testing.T, certPEM, keyPEM []byte, clientCAs ...testCA) string {
	t.Helper()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	for _, ca := range clientCAs {
		pool.AddCert(ca.cert)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
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
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func handshakeWith(cfg *tls.Config, addr string) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	// Read to see a server-side rejection of our cert (TLS 1.3 reports it after the handshake).
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var b [1]byte
	_, err = c.Read(b[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil
	}
	if err != nil && err.Error() == "EOF" {
		return nil
	}
	return err
}

// A CA rotation as operators run it: the Secret's ca.crt becomes a bundle
// of the old and the new CA (written in place by the kubelet), then the
// members' serving certs are reissued by the new CA (etcd reloads its
// serving key pair at each handshake). The agent's CA pool was read once,
// when the member's loop started, and nothing restarts the loop (sameMember
// ignores ClientTLS): the agent can no longer verify the member that
// rotated first, while the others still verify -> "not serving" for the
// local member only -> lost after --grace-period -> a rejoin of a healthy
// member.
func TestARotatedCABundleIsReadAtTheNextHandshake(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := newTestCA(t, "old-ca"), newTestCA(t, "new-ca")
	cert, key := oldCA.leaf(t, "client", false)
	writeSwapped(t, filepath.Join(dir, "ca.crt"), oldCA.pem)
	writeSwapped(t, filepath.Join(dir, "client.crt"), cert)
	writeSwapped(t, filepath.Join(dir, "client.key"), key)
	cur := membersource.PodMember{ClientTLS: clientTLSIn(dir)}
	cfg, err := podClientTLS(cur.ClientTLS, func() membersource.PodMember { return cur }, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.Clone()
	cfg.ServerName = "127.0.0.1"

	// Step 1: the bundle trusted everywhere.
	writeSwapped(t, filepath.Join(dir, "ca.crt"), append(append([]byte{}, oldCA.pem...), newCA.pem...))
	// Step 2: the local member serves a cert of the new CA.
	s, k := newCA.leaf(t, "etcd-0", true)
	addr := serveTLS(t, s, k, oldCA, newCA)
	if err := handshakeWith(cfg, addr); err != nil {
		t.Fatalf("handshake with a member whose serving cert is of the new CA, in the bundle now on disk: %v", err)
	}
}

// A changed --cacert (or --cert/--key) path with the same member identity
// is not a new member for reconcile: the loop keeps the tls.Config built
// when it started, whose CA pool is the old path's.
func TestAPodWhoseGateCACertChangedIsNotTheSameMember(t *testing.T) {
	a := membersource.PodMember{ClientTLS: membersource.ClientTLS{CACert: membersource.NodeFile{Root: "/s/uid-1", Rel: "ca.crt"},
		Cert: membersource.NodeFile{Root: "/s/uid-1", Rel: "c.crt"}, Key: membersource.NodeFile{Root: "/s/uid-1", Rel: "c.key"}}}
	b := a
	b.ClientTLS.CACert.Rel = "other-ca.crt"
	if sameMember(a, b) {
		t.Fatal("sameMember ignores the gate's CA: the loop keeps a CA pool the pod no longer uses")
	}
}

// A pod's writable volume (here its claim's local PV) may hold a symlink
// the pod made: the agent resolves the gate's --key to the PV's path and
// follows the link in its own mount namespace, where the kubelet pods dir
// and every tenant's PV are mounted. A pod that can make its own PVC makes
// the agent load another pod's Secret key (or any file the agent can read)
// as the credential it presents on that pod's behalf.
func TestAGateCertIsNotFollowedOutOfItsVolume(t *testing.T) {
	root := t.TempDir()
	victim := filepath.Join(root, "kubelet-pods", "victim-uid", "volumes", "kubernetes.io~secret", "tls")
	ca := newTestCA(t, "victim-ca")
	cert, key := ca.leaf(t, "victim-client", false)
	writeSwapped(t, filepath.Join(victim, "ca.crt"), ca.pem)
	writeSwapped(t, filepath.Join(victim, "client.crt"), cert)
	writeSwapped(t, filepath.Join(victim, "client.key"), key)
	pvDir := filepath.Join(root, "disks", "pv-attacker")
	if err := os.MkdirAll(pvDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// What the attacker's container does on its own claim.
	if err := os.Symlink(victim, filepath.Join(pvDir, "tls")); err != nil {
		t.Fatal(err)
	}
	w := newClaimWorld(t)
	w.etcd.Command = []string{"/etcd-agent", "gate", "--member-source=pods", "--state-dir=/agent/members/ns_$(POD_NAME)",
		"--cacert=/var/lib/etcd/tls/ca.crt", "--cert=/var/lib/etcd/tls/client.crt", "--key=/var/lib/etcd/tls/client.key", "--",
		"etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd/data",
		"--initial-advertise-peer-urls=https://10.0.0.3:2380", "--advertise-client-urls=https://10.0.0.3:2379"}
	pv := localPV("pv-1", "node2", "local", "1Gi", func(pv *corev1.PersistentVolume) { pv.Spec.Local.Path = pvDir })
	kc := fake.NewClientset(w.claim("uid-1", "pv-1"), pv)
	pm, err := membersource.FromPod(w.pod("pod-1"), apiVolumes{kc: kc}, filepath.Join(root, "kubelet-pods"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := podClientTLS(pm.ClientTLS, func() membersource.PodMember { return pm }, zap.NewNop())
	if err != nil {
		return // refused: fine
	}
	c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil {
		return
	}
	got, _ := x509.ParseCertificate(c.Certificate[0])
	t.Fatalf("the agent loaded %q (%s) through a link the pod made on its own claim, outside the volume", got.Subject.CommonName, pm.ClientTLS.Key.Path())
}

// The kubelet's atomic writer swaps a Secret volume's ..data link while
// handshakes re-read the cert: every cert handed to a handshake must be a
// whole pair (its key matching it), and no handshake may fail for it.
func TestHandshakesDuringAtomicWriterSwapsGetWholePairs(t *testing.T) {
	vol := t.TempDir()
	ca := newTestCA(t, "ca")
	gen := 0
	writeGen := func() {
		gen++
		dir := filepath.Join(vol, "..ts"+big.NewInt(int64(gen)).String())
		cert, key := ca.leaf(t, "client-"+big.NewInt(int64(gen)).String(), false)
		writeSwapped(t, filepath.Join(dir, "ca.crt"), ca.pem)
		writeSwapped(t, filepath.Join(dir, "client.crt"), cert)
		writeSwapped(t, filepath.Join(dir, "client.key"), key)
		tmp := filepath.Join(vol, "..data_tmp")
		_ = os.Remove(tmp)
		if err := os.Symlink(filepath.Base(dir), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
		if gen > 1 {
			_ = os.RemoveAll(filepath.Join(vol, "..ts"+big.NewInt(int64(gen-1)).String()))
		}
	}
	writeGen()
	for _, f := range []string{"ca.crt", "client.crt", "client.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(vol, f)); err != nil {
			t.Fatal(err)
		}
	}
	cur := membersource.PodMember{ClientTLS: clientTLSIn(vol)}
	cfg, err := podClientTLS(cur.ClientTLS, func() membersource.PodMember { return cur }, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
				if err != nil {
					errs <- err
					return
				}
				leaf, err := x509.ParseCertificate(c.Certificate[0])
				if err != nil {
					errs <- err
					return
				}
				if !leaf.PublicKey.(*ecdsa.PublicKey).Equal(c.PrivateKey.(*ecdsa.PrivateKey).Public()) {
					errs <- errors.New("a cert handed out with another cert's key")
					return
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		writeGen()
	}
	close(done)
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
