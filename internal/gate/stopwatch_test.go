package gate

import (
	"slices"
	"strings"
	"testing"
)

// The gate leaves a stop watch only beside an etcd that serves metrics
// (its requests in flight are counted there), reached on a wildcard
// listen address through the loopback, with the gate's TLS flags.
func TestTheStopWatchIsStartedOnlyWithEtcdsMetrics(t *testing.T) {
	etcd := []string{"etcd", "--name=m1", "--data-dir=/var/lib/etcd", "--advertise-client-urls=https://10.0.0.1:2379",
		"--listen-client-urls=https://127.0.0.1:2379,https://0.0.0.0:2379"}
	c := Config{CACert: "/pki/ca.crt", Cert: "/pki/c.crt", Key: "/pki/c.key"}
	args, why := StopWatchArgs(c, append(slices.Clone(etcd), "--listen-metrics-urls=http://0.0.0.0:2381"), nil, "/bin/etcd-agent", 7, "json")
	want := []string{"/bin/etcd-agent", "stop-watch", "--parent-pid=7", "--client-url=https://10.0.0.1:2379",
		"--metrics-url=http://127.0.0.1:2381", "--data-dir=/var/lib/etcd",
		"--listen-url=https://127.0.0.1:2379", "--listen-url=https://127.0.0.1:2379", "--log-format=json",
		"--cacert=/pki/ca.crt", "--cert=/pki/c.crt", "--key=/pki/c.key"}
	if !slices.Equal(args, want) {
		t.Fatalf("args %q (%s)\nwant %q", args, why, want)
	}
	args, why = StopWatchArgs(Config{}, etcd, []string{"ETCD_LISTEN_METRICS_URLS=http://127.0.0.1:2381"}, "/bin/etcd-agent", 7, "")
	if len(args) == 0 || !slices.Contains(args, "--metrics-url=http://127.0.0.1:2381") {
		t.Fatalf("metrics URL from etcd's environment: args %q (%s)", args, why)
	}
	if args, _ := StopWatchArgs(Config{ClientURL: "http://10.0.0.1:2379"}, append(slices.Clone(etcd), "--listen-metrics-urls=http://127.0.0.1:2381"), nil, "/bin/etcd-agent", 1, ""); !slices.Contains(args, "--client-url=http://10.0.0.1:2379") || !slices.Contains(args, "--parent-pid=1") {
		t.Fatalf("the gate's --client-url, and etcd as PID 1 of its container: args %q", args)
	}
	if args, why = StopWatchArgs(Config{}, etcd, nil, "/bin/etcd-agent", 7, ""); args != nil || !strings.Contains(why, "--listen-metrics-urls") {
		t.Fatalf("no metrics URL: args %q, why %q; want none and why", args, why)
	}
}
