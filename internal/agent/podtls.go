package agent

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/etcd-agent/etcd-agent/internal/membersource"
)

// podClientTLS is the client TLS config a pod member is reached with: the
// client cert its start gate uses (membersource.PodMember.ClientTLS), as
// each hosted cluster may have a CA of its own, which no single cert of the
// agent's could answer.
//
// The files are read now (first: the pod read when the member's loop
// starts), and the cert again at each handshake from where the member's
// current pod has it (cur): a Secret volume's files are under
// the pod's UID, so the pod's re-creation (every heal deletes it) moves
// them, and a rotated Secret is written in place. A cert that cannot be
// read then (the old pod's dir gone, the new one not written yet) is the
// last one read: a handshake never fails for want of a file that is
// merely moving. The CA bundle is the one read now (a new CA reaches the
// agent when the member's loop starts again).
func podClientTLS(first membersource.ClientTLS, cur func() membersource.PodMember) (*tls.Config, error) {
	if first.Cert == "" && first.CACert == "" {
		return nil, nil
	}
	if (first.Cert == "") != (first.Key == "") {
		return nil, errors.New("the start gate has --cert without --key, or --key without --cert")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if first.CACert != "" {
		pem, err := os.ReadFile(first.CACert)
		if err != nil {
			return nil, fmt.Errorf("the start gate's --cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the start gate's --cacert %s holds no PEM certificate", first.CACert)
		}
		cfg.RootCAs = pool
	}
	if first.Cert == "" {
		return cfg, nil
	}
	last, err := tls.LoadX509KeyPair(first.Cert, first.Key)
	if err != nil {
		return nil, fmt.Errorf("the start gate's --cert and --key: %w", err)
	}
	var mu sync.Mutex
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		if t := cur().ClientTLS; t.Cert != "" {
			if c, err := tls.LoadX509KeyPair(t.Cert, t.Key); err == nil {
				last = c
			}
		}
		c := last
		return &c, nil
	}
	return cfg, nil
}
