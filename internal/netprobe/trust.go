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
	"x509: ",                // unknown authority, expired, wrong name
	"tls: failed to verify", // crypto/tls's wrapper around the x509 error
	"remote error: tls: ",   // the server's alert: bad/unknown/expired/required certificate
	"authentication handshake failed: tls: bad certificate",
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
	var unknownCA x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	if errors.As(err, &unknownCA) || errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &verify) || errors.As(err, &alert) {
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
