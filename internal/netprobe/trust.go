package netprobe

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// trustFailureText is how a TLS trust failure reads once gRPC has turned it
// into a status message (the typed error is gone by then): the client did
// not trust the server's certificate, or the server refused the client's.
var trustFailureText = []string{
	"x509: certificate signed by unknown authority",
	"x509: certificate has expired or is not yet valid",
	// The server's certificate alerts (RFC 8446 6.2), not every alert: an
	// "internal error" is a member that cannot read its own cert (an
	// --auto-tls member wiped with its data dir), no trust question.
	"remote error: tls: bad certificate",
	"remote error: tls: unsupported certificate",
	"remote error: tls: revoked certificate",
	"remote error: tls: expired certificate",
	"remote error: tls: unknown certificate",
	"remote error: tls: unknown certificate authority",
	"remote error: tls: certificate required",
	"remote error: tls: access denied",
}

// TrustFailure reports whether err is a TLS handshake that failed on trust:
// a certificate one side could not verify or the other refused. Such a
// member may well serve everyone else (mid CA rotation, the agent's own
// cert expired): the agent cannot tell, so it must not read the failure as
// "not serving" (docs/recovery.md, "TLS"). A timeout, a refused or reset
// connection, or a protocol mismatch is not a trust failure.
func TrustFailure(err error) bool {
	if err == nil {
		return false
	}
	// A wrong name is no rotation: another process of the same PKI
	// answers there (a reused pod IP). Only an unknown CA or an expired
	// certificate is a trust question.
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknownCA) || errors.As(err, &invalid) && invalid.Reason == x509.Expired {
		return true
	}
	msg := err.Error()
	for _, s := range trustFailureText {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Handshake makes one TLS handshake with the URL's address using cfg
// (ServerName from the URL's host when cfg has none), then waits up to a
// fifth of timeout for an alert: under TLS 1.3 a server that refuses the
// client's certificate says so only after the client's side is done. It
// returns the handshake's or the alert's error (nil: the handshake went
// through). gRPC hides both behind its deadline; this asks directly.
func Handshake(rawURL string, cfg *tls.Config, timeout time.Duration) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%w: %q", ErrUnprobeable, rawURL)
	}
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName = u.Hostname()
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: c}
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(timeout / 5))
	var b [1]byte
	if _, err := conn.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
