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
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/apimachinery/pkg/types"
)

// issue signs tmpl with ca and returns it as a CA of its own (when it is
// one) with its cert and key PEM.
func (ca testCA) issue(t *testing.T, tmpl *x509.Certificate) (testCA, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// gateFiles writes ca.crt, client.crt and client.key of ca in dir and
// returns the config a pod member with them is reached with.
func gateFiles(t *testing.T, dir string, ca testCA, log *zap.Logger) *tls.Config {
	t.Helper()
	cert, key := ca.leaf(t, "client", false)
	writeSwapped(t, filepath.Join(dir, "ca.crt"), ca.pem)
	writeSwapped(t, filepath.Join(dir, "client.crt"), cert)
	writeSwapped(t, filepath.Join(dir, "client.key"), key)
	cur := membersource.PodMember{ClientTLS: clientTLSIn(dir)}
	cfg, err := podClientTLS(cur.ClientTLS, func() membersource.PodMember { return cur }, log)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The member's cert is verified as crypto/tls verifies it: through the
// intermediates it sends, for the name dialed, and by the CA only.
func TestAPodMembersServingCertIsVerifiedAsCryptoTLSWould(t *testing.T) {
	ca := newTestCA(t, "ca")
	cfg := gateFiles(t, t.TempDir(), ca, zap.NewNop())
	inter, _ := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "intermediate"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign})
	leaf, key := inter.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "etcd-0"}, DNSNames: []string{"etcd-0.etcd"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	addr := serveTLS(t, append(append([]byte{}, leaf.pem...), inter.pem...), key, ca)
	dial := func(name string) error {
		c := cfg.Clone()
		c.ServerName = name
		return handshakeWith(c, addr)
	}
	if err := dial("etcd-0.etcd"); err != nil {
		t.Fatalf("a cert of the CA through its intermediate, for the name dialed: %v", err)
	}
	if err := dial("etcd-1.etcd"); err == nil {
		t.Fatal("a cert for another name accepted")
	}
	other := newTestCA(t, "other")
	s, k := other.leaf(t, "etcd-0", true)
	if err := handshakeWith(withName(cfg, "127.0.0.1"), serveTLS(t, s, k, ca)); err == nil {
		t.Fatal("a cert of another CA accepted")
	}
	client, ck := ca.leaf(t, "client", false)
	if err := handshakeWith(withName(cfg, "127.0.0.1"), serveTLS(t, client, ck, ca)); err == nil {
		t.Fatal("a client cert accepted as a serving cert")
	}
}

func withName(cfg *tls.Config, name string) *tls.Config {
	c := cfg.Clone()
	c.ServerName = name
	return c
}

// The kubelet rotates a Secret or ConfigMap by swapping its ..data link:
// the next handshake verifies with the new bundle. A bundle that does not
// parse leaves the last one in use, and is said once.
func TestARotatedCABundleIsReadThroughTheAtomicWritersLinks(t *testing.T) {
	vol := t.TempDir()
	oldCA, newCA := newTestCA(t, "old"), newTestCA(t, "new")
	generation := 0
	swap := func(ca []byte) {
		generation++
		ts := filepath.Join(vol, "..ts"+big.NewInt(int64(generation)).String())
		cert, key := oldCA.leaf(t, "client", false)
		writeSwapped(t, filepath.Join(ts, "ca.crt"), ca)
		writeSwapped(t, filepath.Join(ts, "client.crt"), cert)
		writeSwapped(t, filepath.Join(ts, "client.key"), key)
		_ = os.Remove(filepath.Join(vol, "..data_tmp"))
		if err := os.Symlink(filepath.Base(ts), filepath.Join(vol, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(vol, "..data_tmp"), filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap(oldCA.pem)
	for _, f := range []string{"ca.crt", "client.crt", "client.key"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(vol, f)); err != nil {
			t.Fatal(err)
		}
	}
	core, logs := observer.New(zapcore.InfoLevel)
	cur := membersource.PodMember{ClientTLS: clientTLSIn(vol)}
	cfg, err := podClientTLS(cur.ClientTLS, func() membersource.PodMember { return cur }, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	s, k := newCA.leaf(t, "etcd-0", true)
	addr := serveTLS(t, s, k, oldCA)
	if err := handshakeWith(withName(cfg, "127.0.0.1"), addr); err == nil {
		t.Fatal("a cert of a CA not in the bundle accepted")
	}
	swap(append(append([]byte{}, oldCA.pem...), newCA.pem...))
	if err := handshakeWith(withName(cfg, "127.0.0.1"), addr); err != nil {
		t.Fatalf("the new bundle: %v", err)
	}
	swap([]byte("not PEM"))
	for range 3 {
		if err := handshakeWith(withName(cfg, "127.0.0.1"), addr); err != nil {
			t.Fatalf("a bundle that does not parse: the last one is not kept: %v", err)
		}
	}
	if n := logs.FilterMessageSnippet("CA bundle cannot be read").FilterField(zap.String("cacert", filepath.Join(vol, "ca.crt"))).Len(); n != 1 {
		t.Fatalf("said %d times, want once: %v", n, logs.All())
	}
}

// A cert or key that cannot be read at a handshake (the pod's files
// moving, a stale cert about to expire) is said once per change, with the
// paths and why.
func TestAClientCertThatCannotBeReadIsSaidOncePerChange(t *testing.T) {
	dir := t.TempDir()
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := gateFiles(t, dir, newTestCA(t, "ca"), zap.New(core))
	handshake := func() {
		t.Helper()
		if _, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{}); err != nil {
			t.Fatal(err)
		}
	}
	warned := func() int {
		return logs.FilterMessageSnippet("client cert cannot be read").FilterField(zap.String("key", filepath.Join(dir, "client.key"))).Len()
	}
	handshake()
	if len(logs.All()) != 0 {
		t.Fatalf("logged %v", logs.All())
	}
	if err := os.Remove(filepath.Join(dir, "client.key")); err != nil {
		t.Fatal(err)
	}
	handshake()
	handshake()
	if warned() != 1 || logs.All()[0].ContextMap()["error"] == nil {
		t.Fatalf("want one warning naming the files and the error: %v", logs.All())
	}
	writeSwapped(t, filepath.Join(dir, "client.key"), []byte("not a key"))
	handshake()
	handshake()
	if warned() != 2 {
		t.Fatalf("another error not said: %v", logs.All())
	}
}

// The same files of a re-created pod (a Secret under its new UID) are
// followed at each handshake: the member's loop is not restarted for them.
func TestARecreatedPodsSecretIsTheSameMember(t *testing.T) {
	in := func(uid string) membersource.PodMember {
		d := "/var/lib/kubelet/pods/" + uid + "/volumes/kubernetes.io~secret/tls"
		return membersource.PodMember{UID: types.UID(uid), ClientTLS: membersource.ClientTLS{CACert: membersource.NodeFile{Root: d, Rel: "ca.crt"}}}
	}
	if !sameMember(in("uid-1"), in("uid-2")) {
		t.Fatal("a re-created pod's Secret restarts the member's loop")
	}
	if sameMember(in("uid-1"), membersource.PodMember{UID: "uid-2"}) {
		t.Fatal("a gate that lost its --cacert is the same member")
	}
}
