package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// Peer proxies (Options.PeerProxy) put an HTTP proxy in front of every
// member's peer listener: the member advertises the proxy's URL (in
// --initial-advertise-peer-urls and --initial-cluster) and listens on its
// own port (--listen-peer-urls), so every raft message between members
// passes through the proxies, where Partition can cut one node off.
//
// A plain TCP proxy per member would cut only half of a node's traffic:
// in etcd's rafthttp, member X's messages to peer Y travel on the stream
// connections that Y dialed to X (GET /raft/stream/... on X's peer URL),
// while pipeline and snapshot POSTs are dialed by their sender. So a proxy
// here is HTTP-aware and tells the sender of each request by the headers
// rafthttp sets on every stream GET and every pipeline/snapshot POST:
// X-Server-From (the sender's member ID, hex) and X-PeerURLs (the sender's
// advertised peer URLs, comma-separated). A partitioned node's own proxy
// refuses every request, and every other proxy refuses the requests whose
// X-PeerURLs name the node's proxy URL (which, unlike a member ID, survives
// a member being removed and added again); the live requests of the cut
// traffic (long-lived stream GETs, POSTs in flight) are cancelled at once,
// which closes their connections.
//
// Not cut: peer requests that carry no sender headers and are sent by the
// partitioned member to the others (the /raft/probing health probe, GET
// /version and /members, forwarded lease renewals): rafthttp's raft
// messages are, and without them the member loses its leader within an
// election timeout (and with it what it would forward leases to).
//
// A proxy listens only while its member does: it polls the member's peer
// listener and closes its own when that refuses connections, and listens
// again when it accepts. So whoever waits for a stopped member's advertised
// peer URL to refuse connections (the agent's member runtime does, before
// it touches the data dir) still sees it stop, within proxyPoll.
//
// The proxies run inside the process that called Up (a chaos runner is a Go
// test process) and stop with Down or with that process: a lab with
// PeerProxy started by the CLI `lab up` would lose its peer traffic when the
// command exits, so the CLI does not offer it, and a lab Open'ed by another
// process has no proxy to cut (Partition says so).

// peerProxies are the lab's peer proxies and the partition state they share.
type peerProxies struct {
	log *zap.Logger
	mu  sync.Mutex
	// byURL: the proxies by the peer URL members advertise.
	byURL map[string]*peerProxy
	// cut: advertised peer URLs of partitioned members, by node.
	cut  map[string]string
	live map[*liveRequest]struct{}
}

// peerProxy is one member's proxy.
type peerProxy struct {
	set    *peerProxies
	url    string // advertised, e.g. http://127.0.0.12:40123
	addr   string // its host:port
	target *url.URL
	srv    *http.Server
	rp     *httputil.ReverseProxy
	tr     *http.Transport
	stop   chan struct{}
	lnMu   sync.Mutex
	ln     net.Listener // nil while the member does not listen
	// ingress, when set, meters the request bodies forwarded to the
	// member (LimitPeerIngress).
	ingress atomic.Pointer[rate.Limiter]
}

// proxyPoll is how often a proxy checks that its member listens.
const proxyPoll = 100 * time.Millisecond

// liveRequest is a request being proxied, cancellable by a partition.
type liveRequest struct {
	proxy  string   // the advertised URL of the proxy serving it
	from   []string // the sender's advertised peer URLs (X-PeerURLs)
	cancel context.CancelFunc
}

func newPeerProxies(log *zap.Logger) *peerProxies {
	return &peerProxies{log: log, byURL: map[string]*peerProxy{}, cut: map[string]string{}, live: map[*liveRequest]struct{}{}}
}

// start runs a proxy serving advertised (scheme://ip:port) that forwards to
// target (the member's --listen-peer-urls).
func (s *peerProxies) start(advertised, target string) error {
	au, err := url.Parse(advertised)
	if err != nil {
		return err
	}
	tu, err := url.Parse(target)
	if err != nil {
		return err
	}
	if au.Scheme != "http" || tu.Scheme != "http" {
		return fmt.Errorf("peer proxy %s -> %s: only plain http peer traffic can be proxied (EtcdTLS must be off)", advertised, target)
	}
	ln, err := net.Listen("tcp", au.Host)
	if err != nil {
		return fmt.Errorf("peer proxy for %s: %w", advertised, err)
	}
	p := &peerProxy{set: s, url: advertised, addr: au.Host, target: tu, stop: make(chan struct{}), ln: ln}
	p.tr = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			s.mu.Lock()
			t := p.target
			s.mu.Unlock()
			pr.SetURL(t)
			pr.Out.Host = pr.In.Host
		},
		Transport:     p.tr,
		FlushInterval: -1, // raft streams: every write goes through at once
		ErrorLog:      log.New(io.Discard, "", 0),
		// The member is down (or the request was cut): to the sender this
		// is a dropped connection, as without the proxy.
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) { panic(http.ErrAbortHandler) },
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	s.mu.Lock()
	s.byURL[advertised] = p
	s.mu.Unlock()
	go func() { _ = p.srv.Serve(ln) }()
	go p.mirror()
	return nil
}

// mirror keeps the proxy listening exactly while its member listens.
func (p *peerProxy) mirror() {
	t := time.NewTicker(proxyPoll)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.set.mu.Lock()
		target := p.target.Host
		p.set.mu.Unlock()
		up, known := dialState(target)
		if !known {
			continue
		}
		p.lnMu.Lock()
		select {
		case <-p.stop: // closed meanwhile: open nothing
			p.lnMu.Unlock()
			return
		default:
		}
		switch {
		case up && p.ln == nil:
			if ln, err := net.Listen("tcp", p.addr); err == nil {
				p.ln = ln
				go func() { _ = p.srv.Serve(ln) }()
			}
		case !up && p.ln != nil:
			_ = p.ln.Close()
			p.ln = nil
		}
		p.lnMu.Unlock()
	}
}

// dialState dials addr once: up when it accepts, down when it refuses,
// unknown otherwise (a timeout proves nothing).
func dialState(addr string) (up, known bool) {
	c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
	if err == nil {
		_ = c.Close()
		return true, true
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false, true
	}
	return false, false
}

// ServeHTTP forwards one peer request unless a partition cuts it.
func (p *peerProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var from []string
	if h := r.Header.Get("X-PeerURLs"); h != "" {
		from = strings.Split(h, ",")
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	lr := &liveRequest{proxy: p.url, from: from, cancel: cancel}
	if !p.set.admit(lr) {
		panic(http.ErrAbortHandler) // close the connection, send nothing
	}
	defer p.set.done(lr)
	if lim := p.ingress.Load(); lim != nil && r.Body != nil && r.Body != http.NoBody {
		r.Body = meteredBody{ReadCloser: r.Body, ctx: ctx, lim: lim}
	}
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// cuts reports whether a partition cuts lr; s.mu is held.
func (s *peerProxies) cuts(lr *liveRequest) bool {
	for _, u := range s.cut {
		if lr.proxy == u || slices.Contains(lr.from, u) {
			return true
		}
	}
	return false
}

func (s *peerProxies) admit(lr *liveRequest) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cuts(lr) {
		return false
	}
	s.live[lr] = struct{}{}
	return true
}

func (s *peerProxies) done(lr *liveRequest) {
	s.mu.Lock()
	delete(s.live, lr)
	s.mu.Unlock()
}

// partition cuts node's peer traffic (its member advertises peerURL) and
// cancels the live requests it cuts.
func (s *peerProxies) partition(node, peerURL string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byURL[peerURL]; !ok {
		return fmt.Errorf("node %s: no peer proxy for %s in this process", node, peerURL)
	}
	s.cut[node] = peerURL
	n := 0
	for lr := range s.live {
		if s.cuts(lr) {
			lr.cancel()
			n++
		}
	}
	s.log.Info("fault: partition", zap.String("node", node), zap.String("peerURL", peerURL), zap.Int("cutLiveRequests", n))
	return nil
}

func (s *peerProxies) heal(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.cut, node)
	s.log.Info("fault: heal partition", zap.String("node", node))
}

func (s *peerProxies) partitioned() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.cut {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// retarget points the proxy for advertised at target (a moved member).
func (s *peerProxies) retarget(advertised, target string) error {
	tu, err := url.Parse(target)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.byURL[advertised]
	if !ok {
		return fmt.Errorf("no peer proxy for %s", advertised)
	}
	p.target = tu
	return nil
}

// close stops every proxy and its connections.
func (s *peerProxies) close() error {
	s.mu.Lock()
	ps := make([]*peerProxy, 0, len(s.byURL))
	for _, p := range s.byURL {
		ps = append(ps, p)
	}
	s.byURL = map[string]*peerProxy{}
	s.mu.Unlock()
	var errs []error
	for _, p := range ps {
		close(p.stop)
		p.lnMu.Lock()
		if p.ln != nil {
			_ = p.ln.Close()
			p.ln = nil
		}
		p.lnMu.Unlock()
		if err := p.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
		p.tr.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// errNoPeerProxy: Partition on a lab whose proxies are not in this process.
func (l *Lab) errNoPeerProxy() error {
	if !l.Spec.PeerProxy {
		return errors.New("this lab has no peer proxies: bring it up with Options.PeerProxy")
	}
	return errors.New("this lab's peer proxies do not run in this process: only the process that called lab.Up can partition (the CLI cannot)")
}

// Partition cuts the peer traffic of node's member in both directions: its
// own proxy refuses every request, the others refuse every request it
// sends, and live connections of that traffic are closed. Its clients can
// still reach it (it cannot serve linearizable requests without a quorum).
func (l *Lab) Partition(node string) error {
	if l.peers == nil {
		return l.errNoPeerProxy()
	}
	n, err := l.Spec.Node(node)
	if err != nil {
		return err
	}
	if n.PeerURL == "" {
		return fmt.Errorf("node %s has no etcd member", node)
	}
	return l.peers.partition(node, n.PeerURL)
}

// HealPartition lets node's peer traffic through again.
func (l *Lab) HealPartition(node string) error {
	if l.peers == nil {
		return l.errNoPeerProxy()
	}
	if _, err := l.Spec.Node(node); err != nil {
		return err
	}
	l.peers.heal(node)
	return nil
}

// Partitioned lists the partitioned nodes (none without live proxies).
func (l *Lab) Partitioned() []string {
	if l.peers == nil {
		return nil
	}
	return l.peers.partitioned()
}
