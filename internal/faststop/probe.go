package faststop

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/netprobe"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// probeTimeout bounds one refusal probe and one metrics read.
const probeTimeout = 500 * time.Millisecond

// prober looks at etcd through its own gRPC connection (closed by etcd's
// GracefulStop with every other one), the client URL and the metrics URL.
type prober struct {
	c      Config
	conn   *grpc.ClientConn
	hc     *http.Client
	served bool
	// counts are the unary requests (started, handled) at the previous
	// metrics read; quietSince when they, and etcd shutting down, began to
	// hold unchanged (zero: not now).
	counts      [2]float64
	quietSince  time.Time
	clockForNow func() time.Time
}

func newProber(c Config) (*prober, error) {
	u, err := url.Parse(c.ClientURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("stop watch: client URL %q: %v", c.ClientURL, err)
	}
	creds := insecure.NewCredentials()
	if u.Scheme == "https" {
		creds = credentials.NewTLS(c.TLS)
	}
	// No idle timeout: leaving READY must mean etcd closed the connection.
	// Short connect attempts and backoff: etcd accepts connections before
	// it serves (grpc's default waits 20 s for a handshake, then backs off
	// up to 2 min), and the watch is of no use until it is connected.
	conn, err := grpc.NewClient("passthrough:///"+u.Host, grpc.WithTransportCredentials(creds), grpc.WithIdleTimeout(0),
		grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: time.Second,
			Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second}}))
	if err != nil {
		return nil, fmt.Errorf("stop watch: %w", err)
	}
	conn.Connect()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = c.TLS
	tr.DisableKeepAlives = true
	return &prober{c: c, conn: conn, hc: &http.Client{Transport: tr, Timeout: probeTimeout}, clockForNow: time.Now}, nil
}

func (p *prober) close() { _ = p.conn.Close() }

func (p *prober) look(ctx context.Context) plan.FastStopFacts {
	var f plan.FastStopFacts
	state := p.conn.GetState()
	if state == connectivity.Ready {
		p.served = true
	}
	f.Served = p.served
	f.Drained = p.served && state != connectivity.Ready
	if state == connectivity.Idle {
		p.conn.Connect() // etcd may still serve (a connection lost otherwise): reconnect
	}
	p.quietFor(&f, ctx)
	return f
}

// quietFor fills in the rest of f once etcd's connection is drained, and
// how long etcd has been shutting down with its request counts unchanged.
func (p *prober) quietFor(f *plan.FastStopFacts, ctx context.Context) {
	now := p.clockForNow()
	if f.Drained {
		f.ClientRefused = allRefused(p.c.ListenURLs)
	}
	if f.ClientRefused {
		f.DBOnDisk = dbOnDisk(p.c.DataDir)
	}
	if !f.ClientRefused || f.DBOnDisk {
		p.quietSince = time.Time{}
		return
	}
	m, err := p.metrics(ctx)
	if err != nil {
		f.MetricsError = err.Error()
		p.quietSince = time.Time{}
		return
	}
	f.IsLeader, f.UnaryInFlight = m.isLeader, m.inFlight
	if counts := [2]float64{m.started, m.handled}; p.quietSince.IsZero() || counts != p.counts {
		p.counts, p.quietSince = counts, now
	}
	f.QuietFor = now.Sub(p.quietSince)
}

// allRefused: every URL refuses a connection (a URL that cannot be probed,
// or a timeout, is not a refusal).
func allRefused(urls []string) bool {
	for _, u := range urls {
		if _, refused, _ := netprobe.Dial(u, probeTimeout); !refused {
			return false
		}
	}
	return len(urls) > 0
}

// etcdCounts is what one metrics read says.
type etcdCounts struct {
	isLeader         bool
	started, handled float64
	inFlight         int
}

func (p *prober) metrics(ctx context.Context) (etcdCounts, error) {
	u := p.c.MetricsURL
	if pu, err := url.Parse(u); err == nil && (pu.Path == "" || pu.Path == "/") {
		u = strings.TrimSuffix(u, "/") + "/metrics"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return etcdCounts{}, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return etcdCounts{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return etcdCounts{}, fmt.Errorf("%s: %s", u, resp.Status)
	}
	return parseCounts(resp.Body)
}

// parseCounts reads etcd_server_is_leader and the unary gRPC requests
// started and handled from a metrics exposition.
func parseCounts(r io.Reader) (etcdCounts, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return etcdCounts{}, err
	}
	leader, ok := fams["etcd_server_is_leader"]
	if !ok || len(leader.Metric) == 0 {
		return etcdCounts{}, fmt.Errorf("no etcd_server_is_leader")
	}
	started, okS := unarySum(fams["grpc_server_started_total"])
	handled, okH := unarySum(fams["grpc_server_handled_total"])
	if !okS || !okH {
		return etcdCounts{}, fmt.Errorf("no grpc_server_started_total or grpc_server_handled_total")
	}
	return etcdCounts{isLeader: leader.Metric[0].GetGauge().GetValue() > 0, started: started, handled: handled,
		inFlight: int(math.Max(0, started-handled))}, nil
}

// unarySum sums a counter's unary series.
func unarySum(fam *dto.MetricFamily) (float64, bool) {
	if fam == nil {
		return 0, false
	}
	var sum float64
	for _, m := range fam.Metric {
		for _, l := range m.Label {
			if l.GetName() == "grpc_type" && l.GetValue() == "unary" {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum, true
}
