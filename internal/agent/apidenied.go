package agent

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
)

// deniedQuiet spaces the log lines of one resource and verb's denials;
// each is counted.
const deniedQuiet = 10 * time.Minute

// countDenials makes the API client count every answer 403 Forbidden in
// etcd_agent_kube_api_denied_total{resource,verb} and log it: a write the
// RBAC or the node-scope policy denies (docs/security.md) would otherwise
// be only in its caller's log line, and on a cluster whose tokens carry no
// node every Node write is denied (EtcdAgentAPIDenied).
func countDenials(cfg *rest.Config, m *metrics.Metrics, log *zap.Logger) {
	if m == nil {
		return
	}
	d := &deniedCounter{m: m, log: log, said: map[string]time.Time{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { d.next = rt; return d })
}

type deniedCounter struct {
	next http.RoundTripper
	m    *metrics.Metrics
	log  *zap.Logger
	mu   sync.Mutex
	said map[string]time.Time // resource/verb -> last logged
}

func (d *deniedCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	resource, verb := apiResource(r.URL.Path), apiVerb(r.Method)
	d.m.KubeAPIDenied.WithLabelValues(resource, verb).Inc()
	d.mu.Lock()
	key, now := resource+"/"+verb, time.Now()
	say := now.Sub(d.said[key]) >= deniedQuiet
	if say {
		d.said[key] = now
	}
	d.mu.Unlock()
	if say {
		d.log.Warn("the Kubernetes API denied the agent a request", zap.String("verb", verb), zap.String("resource", resource),
			zap.String("path", r.URL.Path), zap.String("see", "docs/security.md; etcd_agent_kube_api_denied_total counts each"))
	}
	return resp, err
}

// apiResource names the resource of an API path as RBAC does:
// "nodes", "nodes/status", "leases.coordination.k8s.io".
func apiResource(path string) string {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	group := ""
	switch {
	case len(segs) >= 3 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 4 && segs[0] == "apis":
		group, segs = segs[1], segs[3:]
	default:
		return "other"
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	res := segs[0]
	if group != "" {
		res += "." + group
	}
	if len(segs) >= 3 {
		res += "/" + segs[2]
	}
	return res
}

func apiVerb(method string) string {
	switch method {
	case http.MethodGet:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(method)
}
