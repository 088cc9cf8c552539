package watchdog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/netprobe"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// clients keeps one etcd client per endpoint, so that every member is asked
// about itself over its own URL (a cluster client would balance away from a
// sick member and hide it).
type clients struct {
	tls     *tls.Config
	timeout time.Duration
	// keepAlive: a connection with a stream open (a liveness stream) is
	// pinged after this long without a frame, and dropped (ending its
	// streams) when the ping is not answered within timeout.
	keepAlive time.Duration
	// dialOptions are added to every client's (tests count requests).
	dialOptions []grpc.DialOption
	mu          sync.Mutex
	byURL       map[string]*clientv3.Client
	http        *http.Client // GET /version (clusterVersion)
	// preferred is the endpoint that last answered the member list: asked
	// first, so a down local member does not cost a timeout every poll.
	preferred string
}

func newClients(tlsCfg *tls.Config, timeout time.Duration) *clients {
	return &clients{tls: tlsCfg, timeout: timeout, keepAlive: 10 * time.Second, byURL: map[string]*clientv3.Client{}}
}

func (c *clients) get(url string) (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.byURL[url]; ok {
		return cl, nil
	}
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: c.timeout, TLS: c.tls,
		Logger: zap.NewNop(), DialKeepAliveTime: c.keepAlive, DialKeepAliveTimeout: c.timeout, DialOptions: append(probeDialOptions(), c.dialOptions...)})
	if err != nil {
		return nil, err
	}
	c.byURL[url] = cl
	return cl, nil
}

// probeDialOptions turn gRPC's flow-control tuning off for the probes: it
// sends a ping after each answer's data to measure the bandwidth, a second
// round trip for every request, and the probes' answers are a few hundred
// bytes (the window stays at gRPC's default, 64 KiB). The write buffer is
// taken from a pool per write, not held per connection: an agent keeps
// three idle connections per member of a three-member cluster.
func probeDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(64 << 10), grpc.WithStaticConnWindowSize(64 << 10), grpc.WithSharedWriteBuffer(true)}
}

// connected: the client of url has a ready connection, so the member was
// reachable a moment ago and a request fails fast if it is gone (a reset
// connection); the TCP probe before each request is then not needed.
func (c *clients) connected(url string) bool {
	c.mu.Lock()
	cl := c.byURL[url]
	c.mu.Unlock()
	return cl != nil && cl.ActiveConnection().GetState() == connectivity.Ready
}

// status asks ep for its own Status over its client's one connection:
// clientv3's Maintenance.Status dials a new connection on every call (a TCP
// and HTTP/2 handshake per member per poll).
func status(ctx context.Context, cl *clientv3.Client, ep string) (*clientv3.StatusResponse, error) {
	return clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(cl.ActiveConnection()), cl).Status(ctx, ep)
}

// forget closes clients of endpoints no longer wanted.
func (c *clients) forget(keep map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for url, cl := range c.byURL {
		if !keep[url] {
			cl.Close()
			delete(c.byURL, url)
		}
	}
}

func (c *clients) close() {
	c.forget(nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.http != nil {
		c.http.CloseIdleConnections()
	}
}

// drop closes the client of url after a failure: gRPC's reconnect backoff
// grows while a member is down (to many seconds), and a member that comes
// back (a learner starting) must be seen at once, not after the backoff.
func (c *clients) drop(url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.byURL[url]; ok {
		cl.Close()
		delete(c.byURL, url)
	}
}

// memberList asks the endpoints in turn for the member list. With
// requireLeader it is linearizable (etcd 3.6's default) and a member cut off
// from the quorum refuses; without, a member answers from its own, maybe
// stale, view.
// An endpoint answering for another cluster than pin (when pin is set) is
// skipped and added to foreign.
func (c *clients) memberList(ctx context.Context, endpoints []string, requireLeader bool, pin uint64, foreign *[]string) (*clientv3.MemberListResponse, string, error) {
	var lastErr error
	c.mu.Lock()
	if i := slices.Index(endpoints, c.preferred); i > 0 {
		endpoints = append([]string{c.preferred}, slices.Delete(slices.Clone(endpoints), i, i+1)...)
	}
	c.mu.Unlock()
	for _, ep := range endpoints {
		if !c.connected(ep) && !reachable(ep) {
			lastErr = fmt.Errorf("%s: connection refused", ep)
			c.drop(ep)
			continue
		}
		cl, err := c.get(ep)
		if err != nil {
			lastErr = err
			continue
		}
		if requireLeader {
			ctx = clientv3.WithRequireLeader(ctx)
		}
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		var opts []clientv3.OpOption
		if !requireLeader {
			opts = append(opts, clientv3.WithSerializable())
		}
		resp, err := cl.MemberList(rctx, opts...)
		cancel()
		if err == nil && (answer{cluster: resp.Header.ClusterId}).foreign(pin) {
			*foreign = append(*foreign, ep)
			lastErr = fmt.Errorf("%s answers for cluster %x, not %x", ep, resp.Header.ClusterId, pin)
			continue
		}
		if err == nil {
			c.mu.Lock()
			c.preferred = ep
			c.mu.Unlock()
			return resp, ep, nil
		}
		lastErr = fmt.Errorf("%s: %w", ep, err)
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("no etcd endpoint known")
	}
	return nil, "", lastErr
}

// reachable is a quick TCP connect to an http(s) endpoint: a member whose
// port refuses is down now, and asking it over gRPC would wait out the
// whole timeout (clientv3 waits for a ready connection).
func reachable(endpoint string) bool {
	accepted, _, err := netprobe.Dial(endpoint, 300*time.Millisecond)
	if errors.Is(err, netprobe.ErrUnprobeable) {
		return true // let gRPC tell
	}
	return accepted
}

// firstReachable is the first of a member's client URLs that accepts a
// connection (or is connected already); the first one when none does. A
// member may advertise a URL it does not listen on: a learner whose
// client URLs are set aside listens only on the last (plan.asideClientURLs).
func (c *clients) firstReachable(urls []string) (string, bool) {
	for _, ep := range urls {
		if c.connected(ep) || reachable(ep) {
			return ep, true
		}
	}
	return urls[0], false
}

// checkTrust asks a member whose Status failed for a TLS handshake: gRPC
// reports a trust failure (a certificate from a CA the agent does not know
// yet, its own refused) only as its deadline, and such a member may serve
// everyone else, so it must not read as "not serving" (memberstate never
// judges it lost; docs/recovery.md, "TLS").
func (c *clients) checkTrust(m *observation.Member, ep string) {
	if c.tls == nil || !strings.HasPrefix(ep, "https://") {
		return
	}
	if err := netprobe.Handshake(ep, c.tls, c.timeout); netprobe.TrustFailure(err) {
		m.AuthFailed = true
		m.ProbeError += "; TLS trust failure: " + err.Error()
	}
}

// answer is who answered a Status request: its header's member and cluster
// IDs (zero when nothing answered).
// leader is the leader the member knows (from its Status).
type answer struct{ member, cluster, leader uint64 }

// foreign: the answer came from another cluster than pin (when pin is set).
func (a answer) foreign(pin uint64) bool { return pin != 0 && a.cluster != 0 && a.cluster != pin }

// probe fills m from its own Status and, for a voter, a linearizable read
// served through it (Status alone answers even without a quorum). A process
// answering as another member than m.ID (when m.ID is known), or for another
// cluster than pin, is not m.
func (c *clients) probe(ctx context.Context, m *observation.Member, pin uint64) answer {
	if len(m.ClientURLs) == 0 {
		m.ProbeError = "no client URL (member not started yet)"
		return answer{}
	}
	ep, ok := c.firstReachable(m.ClientURLs)
	if !ok {
		m.ProbeError = "unreachable: connection refused"
		for _, u := range m.ClientURLs {
			c.drop(u)
		}
		return answer{}
	}
	cl, err := c.get(ep)
	if err != nil {
		m.ProbeError = err.Error()
		c.checkTrust(m, ep)
		return answer{}
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	st, err := status(rctx, cl, ep)
	if err != nil {
		m.ProbeError = "status: " + err.Error()
		c.drop(ep)
		c.checkTrust(m, ep)
		return answer{}
	}
	ans := answer{member: st.Header.MemberId, cluster: st.Header.ClusterId, leader: st.Leader}
	if ans.foreign(pin) {
		m.ProbeError = fmt.Sprintf("%s answers for cluster %x, not %x", ep, ans.cluster, pin)
		return ans
	}
	if m.ID != 0 && ans.member != m.ID {
		m.ProbeError = fmt.Sprintf("%s answers as member %x", ep, ans.member)
		return ans
	}
	m.IsLeader = st.Leader == st.Header.MemberId
	m.RaftTerm, m.RaftIndex, m.AppliedIndex = st.RaftTerm, st.RaftIndex, st.RaftAppliedIndex
	m.DBSize, m.Version = st.DbSize, st.Version
	m.DowngradeEnabled = st.DowngradeInfo != nil && st.DowngradeInfo.Enabled
	m.Errors = st.Errors
	if st.Leader == 0 {
		m.ProbeError = "member has no leader"
		return ans
	}
	if !m.IsLearner {
		if _, err := cl.Get(rctx, "etcd-agent-health", clientv3.WithCountOnly()); err != nil {
			m.ProbeError = "linearizable read: " + err.Error()
			c.drop(ep)
			return ans
		}
	}
	m.Serving = true
	return ans
}
