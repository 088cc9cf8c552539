package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
	"go.uber.org/zap"
)

// podClientTLS is the client TLS config a pod member is reached with: the
// client cert its start gate uses (membersource.PodMember.ClientTLS), as
// each hosted cluster may have a CA of its own, which no single cert of the
// agent's could answer.
//
// The files are read now (first: the pod read when the member's loop
// starts), and again at each handshake from where the member's current pod
// has them (cur): a Secret's or ConfigMap's files are under the pod's UID,
// so the pod's re-creation (every heal deletes it) moves them, and a
// rotated Secret (a new cert, a CA bundle) is written in place. A file that
// cannot be read then (the old pod's dir gone, the new one not written
// yet) leaves the last one read in use, and is logged once: a handshake
// never fails for want of a file that is merely moving. Files are read
// inside their volume only (membersource.NodeFile).
func podClientTLS(first membersource.ClientTLS, cur func() membersource.PodMember, log *zap.Logger) (*tls.Config, error) {
	if first.Cert.IsZero() && first.CACert.IsZero() {
		return nil, nil
	}
	if first.Cert.IsZero() != first.Key.IsZero() {
		return nil, errors.New("the start gate has --cert without --key, or --key without --cert")
	}
	f := &podTLSFiles{cur: cur, log: log}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if !first.CACert.IsZero() {
		pool, err := readCAPool(first.CACert)
		if err != nil {
			return nil, fmt.Errorf("the start gate's --cacert: %w", err)
		}
		f.roots = pool
		// RootCAs would be the pool a client was built with, for its
		// lifetime (clients are kept): verify with the one on disk now.
		cfg.InsecureSkipVerify = true // #nosec G402 -- VerifyConnection verifies as crypto/tls would
		cfg.VerifyConnection = f.verify
	}
	if first.Cert.IsZero() {
		return cfg, nil
	}
	c, err := readKeyPair(first.Cert, first.Key)
	if err != nil {
		return nil, fmt.Errorf("the start gate's --cert and --key: %w", err)
	}
	f.cert = c
	cfg.GetClientCertificate = f.clientCert
	return cfg, nil
}

// podTLSFiles are a pod member's TLS files as last read.
type podTLSFiles struct {
	cur func() membersource.PodMember
	log *zap.Logger

	mu    sync.Mutex
	roots *x509.CertPool  // the last CA bundle that parsed
	cert  tls.Certificate // the last pair that loaded
	// caErr, certErr: the failure last logged, said once until it changes.
	caErr, certErr string
}

func (f *podTLSFiles) clientCert(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.cur().ClientTLS; !t.Cert.IsZero() {
		c, err := readKeyPair(t.Cert, t.Key)
		if err == nil {
			f.cert = c
		}
		f.say(&f.certErr, err, "the member's client cert cannot be read; the last one read is used (it may be stale, or expire)",
			zap.String("cert", t.Cert.Path()), zap.String("key", t.Key.Path()))
	}
	c := f.cert
	return &c, nil
}

func (f *podTLSFiles) rootsNow() *x509.CertPool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ca := f.cur().ClientTLS.CACert; !ca.IsZero() {
		pool, err := readCAPool(ca)
		if err == nil {
			f.roots = pool
		}
		f.say(&f.caErr, err, "the member's CA bundle cannot be read; the last one read is used (a rotated CA may not verify)",
			zap.String("cacert", ca.Path()))
	}
	return f.roots
}

// verify checks the member's chain against the CA bundle now on disk as
// crypto/tls does with RootCAs: intermediates as the peer sent them, for
// the server name sent. (crypto/tls sends no name for an IP address, and
// VerifyConnection is not told the address dialed: a cert for an IP is
// verified by its chain, not for the IP.)
func (f *podTLSFiles) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the member sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: f.rootsNow(), DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	return nil
}

// say logs err once per change, and that it cleared.
func (f *podTLSFiles) say(last *string, err error, msg string, fields ...zap.Field) {
	switch {
	case err == nil && *last != "":
		*last = ""
		f.log.Info("the member's TLS files can be read again", fields...)
	case err != nil && err.Error() != *last:
		*last = err.Error()
		f.log.Warn(msg, append(fields, zap.Error(err))...)
	}
}

func readCAPool(ca membersource.NodeFile) (*x509.CertPool, error) {
	pem, err := ca.ReadFile()
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", ca.Path())
	}
	return pool, nil
}

func readKeyPair(cert, key membersource.NodeFile) (tls.Certificate, error) {
	c, err := cert.ReadFile()
	if err != nil {
		return tls.Certificate{}, err
	}
	k, err := key.ReadFile()
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(c, k)
}
