package watchdog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// livenessKey is watched by the liveness streams; nothing writes it (an
// event on it would only be read and dropped).
const livenessKey = "etcd-agent-liveness"

// liveness keeps one require-leader watch stream open to each member of
// the last healthy full probe. An idle stream costs no request (its
// connection's keepalive pings it after clients.keepAlive without a
// frame), and it
// ends, at once, when the member's process exits or its connection
// breaks, or within three election timeouts of the member losing its
// leader (etcd cancels require-leader streams then), or when the
// keepalive gets no answer. A member that keeps its leader and its
// connection but stops serving (a stalled disk or apply loop) keeps its
// stream: the next full probe sees it. While every stream of a probe stays
// open, a routine poll reuses that probe without asking anything
// (quickObserve); a stream that ends wakes Run for a full observation.
// The streams are raw gRPC Watch streams, not clientv3's Watcher: that one
// resumes a broken stream on its own and never says it broke, which is
// the one thing wanted here.
type liveness struct {
	ctx    context.Context
	cancel context.CancelFunc
	// ended holds one pending signal: some stream ended since Run last
	// looked.
	ended chan struct{}
	mu    sync.Mutex
	byID  map[uint64]*liveStream
}

type liveStream struct {
	url    string
	cancel context.CancelFunc
	done   chan struct{} // closed when the stream ended
	exited chan struct{} // closed when its goroutine is gone
	// stopped: ended by us (member gone, agent closing), not a signal.
	stopped atomic.Bool
	// goaway: ended because its connection left Ready (the member stops).
	goaway atomic.Bool
}

func (s *liveStream) stop() {
	s.stopped.Store(true)
	s.cancel()
}

func newLiveness() *liveness {
	ctx, cancel := context.WithCancel(context.Background())
	return &liveness{ctx: ctx, cancel: cancel, ended: make(chan struct{}, 1), byID: map[uint64]*liveStream{}}
}

// close ends every stream, and waits (bounded) for their goroutines.
func (l *liveness) close() {
	l.cancel()
	l.mu.Lock()
	var streams []*liveStream
	for id, s := range l.byID {
		s.stop()
		streams = append(streams, s)
		delete(l.byID, id)
	}
	l.mu.Unlock()
	deadline := time.After(5 * time.Second) // a cancelled Recv returns at once
	for _, s := range streams {
		select {
		case <-s.exited:
		case <-deadline:
			return
		}
	}
}

// intact: every member has an open stream to its client URL, so none of
// them exited, lost its connection or its leader since its stream opened.
func (l *liveness) intact(members []observation.Member) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range members {
		s, ok := l.byID[m.ID]
		if !ok || len(m.ClientURLs) == 0 || s.url != m.ClientURLs[0] || isDone(s.done) {
			return false
		}
	}
	return true
}

// ensure keeps a stream open to each member (opening those missing or
// ended, each bounded by timeout) and closes the streams of members no
// longer listed. A stream is kept only when the member that answers it is
// the one listed, of cluster (rule 7).
func (l *liveness) ensure(c *clients, members []observation.Member, cluster uint64, timeout time.Duration) error {
	l.mu.Lock()
	for id, s := range l.byID {
		i := slices.IndexFunc(members, func(m observation.Member) bool { return m.ID == id })
		if i < 0 || len(members[i].ClientURLs) == 0 || members[i].ClientURLs[0] != s.url || isDone(s.done) {
			s.stop()
			delete(l.byID, id)
		}
	}
	l.mu.Unlock()
	var errs []error
	for _, m := range members {
		l.mu.Lock()
		_, open := l.byID[m.ID]
		l.mu.Unlock()
		if open || len(m.ClientURLs) == 0 {
			continue
		}
		s, err := l.open(c, m.ID, m.ClientURLs[0], cluster, timeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.mu.Lock()
		if old, ok := l.byID[m.ID]; ok && !isDone(old.done) {
			s.stop() // another observation opened one meanwhile
		} else {
			l.byID[m.ID] = s
		}
		l.mu.Unlock()
	}
	return errors.Join(errs...)
}

func (l *liveness) open(c *clients, id uint64, url string, cluster uint64, timeout time.Duration) (*liveStream, error) {
	cl, err := c.get(url)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.ctx))
	timer := time.AfterFunc(timeout, cancel) // bounds the stream's creation, the Send and the first Recv
	var resp *pb.WatchResponse
	ws, err := pb.NewWatchClient(cl.ActiveConnection()).Watch(ctx)
	if err == nil {
		req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte(livenessKey)}}}
		if err = ws.Send(req); err == nil {
			resp, err = ws.Recv()
		}
	}
	if !timer.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	switch {
	case err != nil:
		cancel()
		return nil, fmt.Errorf("liveness stream to %s: %w", url, err)
	case !resp.Created || resp.Canceled || resp.Header == nil || resp.Header.MemberId != id || resp.Header.ClusterId != cluster:
		cancel()
		return nil, fmt.Errorf("liveness stream to %s: answered by member %x of cluster %x, want %x of %x", url,
			resp.GetHeader().GetMemberId(), resp.GetHeader().GetClusterId(), id, cluster)
	}
	s := &liveStream{url: url, cancel: cancel, done: make(chan struct{}), exited: make(chan struct{})}
	// A member that stops gracefully sends GOAWAY and waits for open
	// streams (etcd waits up to its request timeout, some 7 s, before it
	// cuts them): the connection leaving Ready ends the stream at once,
	// so the agent never holds up a member's stop.
	conn := cl.ActiveConnection()
	go func() {
		if conn.WaitForStateChange(ctx, connectivity.Ready) {
			s.goaway.Store(true)
			cancel()
		}
	}()
	go func() {
		defer close(s.exited)
		for {
			if r, err := ws.Recv(); err != nil || r.Canceled {
				break
			}
		}
		cancel()
		close(s.done) // before the signal: the poll it wakes must see the stream ended
		if !s.stopped.Load() {
			select {
			case l.ended <- struct{}{}:
			default: // a full observation is already due
			}
		}
	}()
	return s, nil
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
