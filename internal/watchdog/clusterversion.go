package watchdog

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.etcd.io/etcd/api/v3/version"
)

// clusterVersion asks the leader (else any serving member) for the cluster
// version etcd serves at /version on its client URL: the version every
// member must be able to run, which the leader raises once all members run
// a newer minor (plan's version rule, docs/recovery.md "etcd versions").
// "" when none answers it (etcd 3.6 with --listen-client-http-urls serves
// /version elsewhere): the rule then goes by the members' own versions.
func (c *clients) clusterVersion(ctx context.Context, o observation.Observation) string {
	var order []observation.Member
	if l, ok := o.Member(o.LeaderID); ok && l.Serving {
		order = append(order, l)
	}
	for _, m := range o.Members {
		if m.Serving && m.ID != o.LeaderID {
			order = append(order, m)
		}
	}
	// The leader and one other at most: each ask may take the probe
	// timeout, and the observation must stay short.
	for _, m := range order[:min(len(order), 2)] {
		if v, err := c.versions(ctx, m.ClientURLs[0]); err == nil && v.Cluster != "" && v.Cluster != "not_decided" {
			return v.Cluster
		}
	}
	return ""
}

// versions is GET <clientURL>/version, within the probe timeout.
func (c *clients) versions(ctx context.Context, clientURL string) (version.Versions, error) {
	var v version.Versions
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, strings.TrimSuffix(clientURL, "/")+"/version", nil)
	if err != nil {
		return v, err
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&v)
	return v, err
}

// httpClient is the probes' HTTP client: the members' TLS, kept open.
func (c *clients) httpClient() *http.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = c.tls
		t.Proxy = nil // members are dialed directly, as by the gRPC clients
		c.http = &http.Client{Transport: t}
	}
	return c.http
}
