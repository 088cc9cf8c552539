package lab

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A hosted cluster with TLS on (Options.HostedTLS) runs as etcd-druid and
// bitnami's chart run it: client and peer URLs https with client cert auth
// on both, from a CA of its own; the certs come from a Secret mounted into
// the etcd container, and the start gate reaches the other members with the
// Secret's client cert. The agent serving the pod reaches its member with
// that same client cert (it has no cert of its own for this cluster).
const (
	hostedTLSSecret = "etcd-tls"
	hostedTLSMount  = "/etc/etcd/tls"
)

// hostedTLS reports whether hosted cluster ns serves TLS.
func (l *Lab) hostedTLS(ns string) bool {
	return l.Spec.Management != nil && l.Spec.Management.HostedTLS[ns]
}

// hostedPKIDir holds hosted cluster ns's PKI on the lab's side (what the
// tests' clients use; the pods read the Secret).
func (l *Lab) hostedPKIDir(ns string) string {
	return filepath.Join(l.Spec.Dir, "pki", "hosted", ns)
}

// writeHostedPKI makes hosted cluster ns's CA, a serving cert (server and
// client auth) for its pods' IPs and a client cert, in hostedPKIDir.
func (l *Lab) writeHostedPKI(ns string) (map[string][]byte, error) {
	ca, err := newCA("etcd-ca-" + ns)
	if err != nil {
		return nil, err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	for i := range l.HostedReplicas() {
		ips = append(ips, net.ParseIP(l.HostedPodIP(ns, fmt.Sprintf("%s-%d", HostedEtcdName, i))))
	}
	server, err := ca.issue("etcd-server-"+ns, []string{"localhost"}, ips, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, err
	}
	client, err := ca.issue("etcd-client-"+ns, nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"ca.crt": ca.certPEM, "server.crt": server.certPEM, "server.key": server.keyPEM,
		"client.crt": client.certPEM, "client.key": client.keyPEM}
	dir := l.hostedPKIDir(ns)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// createHostedTLSSecret writes hosted cluster ns's PKI and its Secret.
func (l *Lab) createHostedTLSSecret(ctx context.Context, ns string) error {
	files, err := l.writeHostedPKI(ns)
	if err != nil {
		return err
	}
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: hostedTLSSecret}, Type: corev1.SecretTypeOpaque, Data: files}
	if _, err := kc.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return fmt.Errorf("create secret %s/%s: %w", ns, hostedTLSSecret, err)
	}
	return nil
}

// hostedScheme is the scheme of hosted cluster ns's client and peer URLs.
func (l *Lab) hostedScheme(ns string) string {
	if l.hostedTLS(ns) {
		return "https"
	}
	return "http"
}

// hostedTLSPod adds TLS to a hosted pod's etcd flags, the gate's flags
// (its client cert) and the Secret's volume and mount.
func hostedTLSPod(args, gate []string, mounts []corev1.VolumeMount, volumes []corev1.Volume) ([]string, []string, []corev1.VolumeMount, []corev1.Volume) {
	f := func(name string) string { return hostedTLSMount + "/" + name }
	args = append(args,
		"--cert-file="+f("server.crt"), "--key-file="+f("server.key"), "--trusted-ca-file="+f("ca.crt"), "--client-cert-auth=true",
		"--peer-cert-file="+f("server.crt"), "--peer-key-file="+f("server.key"), "--peer-trusted-ca-file="+f("ca.crt"), "--peer-client-cert-auth=true")
	gate = append(gate, "--cacert="+f("ca.crt"), "--cert="+f("client.crt"), "--key="+f("client.key"))
	mounts = append(mounts, corev1.VolumeMount{Name: "tls", MountPath: hostedTLSMount, ReadOnly: true})
	volumes = append(volumes, corev1.Volume{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: hostedTLSSecret}}})
	return args, gate, mounts, volumes
}

// HostedTLSConfig is the client TLS config for hosted cluster ns (nil when
// it serves plain http).
func (l *Lab) HostedTLSConfig(ns string) (*tls.Config, error) {
	if !l.hostedTLS(ns) {
		return nil, nil
	}
	d := l.hostedPKIDir(ns)
	return transport.TLSInfo{TrustedCAFile: filepath.Join(d, "ca.crt"), CertFile: filepath.Join(d, "client.crt"),
		KeyFile: filepath.Join(d, "client.key")}.ClientConfig()
}
