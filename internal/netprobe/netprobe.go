// Package netprobe asks one question of an etcd URL without speaking its
// protocol: does anything accept a connection there now? A quick TCP (or
// unix socket) connect tells a member that is gone (its port refuses) from
// one that may still be there, without waiting out a gRPC timeout.
package netprobe

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"
)

// ErrUnprobeable: the URL cannot be probed this way (unparsable, no port,
// an unknown scheme); asking again will not help.
var ErrUnprobeable = errors.New("URL cannot be probed")

// Dial connects once to the URL's address (http/https: TCP; unix/unixs:
// the socket) within timeout. accepted: a connection was made. refused: a
// definite "nobody listens" (ECONNREFUSED, a missing unix socket). Neither,
// with err: the answer is unknown (a timeout proves nothing), or err wraps
// ErrUnprobeable.
func Dial(rawURL string, timeout time.Duration) (accepted, refused bool, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false, false, fmt.Errorf("%w: parse %q: %v", ErrUnprobeable, rawURL, err)
	}
	network, addr := "tcp", u.Host
	switch u.Scheme {
	case "unix", "unixs":
		network, addr = "unix", u.Host+u.Path
	case "http", "https":
		if u.Port() == "" {
			return false, false, fmt.Errorf("%w: %q has no port", ErrUnprobeable, rawURL)
		}
	default:
		return false, false, fmt.Errorf("%w: %q: unsupported scheme %q", ErrUnprobeable, rawURL, u.Scheme)
	}
	conn, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		conn.Close()
		return true, false, nil
	}
	if errors.Is(err, syscall.ECONNREFUSED) || (network == "unix" && errors.Is(err, syscall.ENOENT)) {
		return false, true, nil
	}
	return false, false, fmt.Errorf("dial %s: %w", rawURL, err)
}
