package gate

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/manifest"
)

// StopWatchArgs is the command line of the stop watch (package faststop)
// the gate leaves beside etcd, from the etcd command line it execs; ""
// and why when there is none (etcd serves no metrics to count its
// requests in flight by). self is this binary, pid the gate's (etcd's).
func StopWatchArgs(c Config, argv, environ []string, self string, pid int, logFormat string) ([]string, string) {
	m, err := manifest.MemberFromArgv(argv, environ)
	if err != nil {
		return nil, "the etcd command line: " + err.Error()
	}
	if len(m.MetricsURLs) == 0 {
		return nil, "etcd sets no --listen-metrics-urls: its requests in flight cannot be counted, so its stops keep their graceful wait"
	}
	metrics, err := reachable(m.MetricsURLs[0])
	if err != nil {
		return nil, err.Error()
	}
	client := c.ClientURL
	for _, u := range m.ClientURLs {
		if client == "" && (strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")) {
			client = u
		}
	}
	if client == "" {
		return nil, "etcd advertises no http(s) client URL for the watch's own connection"
	}
	listen := m.ListenClientURLs
	if len(listen) == 0 {
		listen = []string{"http://localhost:2379"} // etcd's default
	}
	dataDir := m.DataDir
	if c.DataDir != "" {
		dataDir = c.DataDir
	}
	args := []string{self, "stop-watch", "--parent-pid=" + strconv.Itoa(pid), "--client-url=" + client,
		"--metrics-url=" + metrics, "--data-dir=" + dataDir}
	// etcd is shutting down only when every client listener refuses (it
	// closes them one after another).
	for _, u := range append(slices.Clone(listen), m.ListenClientHTTPURLs...) {
		r, err := reachable(u)
		if err != nil {
			return nil, err.Error()
		}
		args = append(args, "--listen-url="+r)
	}
	if logFormat != "" {
		args = append(args, "--log-format="+logFormat)
	}
	for _, f := range [][2]string{{"cacert", c.CACert}, {"cert", c.Cert}, {"key", c.Key}} {
		if f[1] != "" {
			args = append(args, "--"+f[0]+"="+f[1])
		}
	}
	return args, ""
}

// reachable turns a listen URL into one to connect to (a wildcard host is
// the loopback address).
func reachable(listen string) (string, error) {
	u, err := url.Parse(listen)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("listen URL %q: not a URL", listen)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	}
	return u.String(), nil
}

// StartStopWatch starts the stop watch and leaves it: once the gate has
// exec'd etcd, etcd is its parent, and it ends with etcd. Its log goes to
// etcd's stderr (the etcd container's log).
func StartStopWatch(args []string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the stop watch: %w", err)
	}
	return cmd.Process.Release()
}
