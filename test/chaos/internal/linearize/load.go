package linearize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Options shape the load; zero values take the defaults.
type Options struct {
	// Clients is the number of concurrent workers (default 3).
	Clients int
	// Keys is how many keys they share (default 4): few keys keep ops
	// contending, which is what exposes a lost write or a stale read.
	Keys int
	// Prefix the keys live under (default "/lab-linearize/<start unix ns>/");
	// it must be fresh, since the model starts from absent keys.
	Prefix string
	// Interval is each worker's pause between ops (default 50ms).
	Interval time.Duration
	// OpTimeout is every op's deadline (default 3s).
	OpTimeout time.Duration
	// Seed makes each worker's choice of ops reproducible.
	Seed uint64
}

func (o Options) withDefaults(now time.Time) Options {
	if o.Clients <= 0 {
		o.Clients = 3
	}
	if o.Keys <= 0 {
		o.Keys = 4
	}
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("/lab-linearize/%d/", now.UnixNano())
	}
	if o.Interval <= 0 {
		o.Interval = 50 * time.Millisecond
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 3 * time.Second
	}
	return o
}

// Key is the i-th key of the load.
func (o Options) Key(i int) string { return fmt.Sprintf("%sk%d", o.Prefix, i) }

type opState uint8

const (
	inFlight opState = iota
	returned
	dropped // a Get that failed
)

// Load is a running load generator and the history it records.
type Load struct {
	opts     Options
	cli      *clientv3.Client
	start    time.Time
	stop     chan struct{} // closed by Stop: start no new op
	opCtx    context.Context
	opCancel context.CancelFunc // cancels in-flight ops that outlive Stop's wait
	done     chan struct{}      // closed when every worker has returned

	mu         sync.Mutex
	ops        []Op
	state      []opState // state[i] is where ops[i] stands
	failedGets int
	stopOnce   sync.Once
	stopped    History
}

// Start runs o.Clients workers against cli until ctx is cancelled or Stop
// is called.
func Start(ctx context.Context, cli *clientv3.Client, o Options) *Load {
	now := time.Now()
	o = o.withDefaults(now)
	opCtx, opCancel := context.WithCancel(ctx)
	l := &Load{opts: o, cli: cli, start: now, stop: make(chan struct{}), opCtx: opCtx, opCancel: opCancel,
		done: make(chan struct{})}
	var wg sync.WaitGroup
	for w := range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.work(w)
		}()
	}
	go func() {
		wg.Wait()
		close(l.done)
	}()
	return l
}

// Options are the load's options with defaults filled in.
func (l *Load) Options() Options { return l.opts }

// Done is closed once every worker has returned (after ctx is cancelled or
// Stop is called).
func (l *Load) Done() <-chan struct{} { return l.done }

// Progress counts the ops that have returned so far and the CASes among
// them that swapped, so a caller can poll for enough history.
func (l *Load) Progress() (completed, swapped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, op := range l.ops {
		if l.state[i] != inFlight {
			completed++
			if op.Swapped {
				swapped++
			}
		}
	}
	return completed, swapped
}

// Stop starts no new op, waits up to OpTimeout+1s for in-flight ops, then
// cancels the rest, and returns the history. A write still in flight when
// the history is taken counts as unknown. Stop may be called more than once.
func (l *Load) Stop() History {
	l.stopOnce.Do(func() {
		close(l.stop)
		select {
		case <-l.done:
		case <-time.After(l.opts.OpTimeout + time.Second):
			l.opCancel()
			select { // the client honours cancellation; do not hang if it does not
			case <-l.done:
			case <-time.After(5 * time.Second):
			}
		}
		l.opCancel()
		l.stopped = l.snapshot()
	})
	return l.stopped
}

func (l *Load) snapshot() History {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := History{Start: l.start, FailedGets: l.failedGets}
	for i, op := range l.ops {
		switch {
		case l.state[i] == dropped:
			continue
		case l.state[i] == inFlight && !op.IsWrite():
			continue
		case l.state[i] == inFlight:
			op.Known, op.Err = false, "still in flight when the history was taken"
		}
		h.Ops = append(h.Ops, op)
	}
	sort.SliceStable(h.Ops, func(i, j int) bool { return h.Ops[i].Call < h.Ops[j].Call })
	return h
}

// work is one worker's loop; it ends when Stop is called or ctx is done.
func (l *Load) work(w int) {
	rng := rand.New(rand.NewPCG(l.opts.Seed, uint64(w)))
	// last is the value this worker last knew for each key: what its CAS
	// expects, so some CASes swap and some find the key moved on.
	last := make(map[string]string)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for n := 0; ; n++ {
		select {
		case <-l.stop:
			return
		case <-l.opCtx.Done():
			return
		case <-timer.C:
		}
		key := l.opts.Key(rng.IntN(l.opts.Keys))
		op := Op{Worker: w, Key: key, Value: fmt.Sprintf("w%d-%d", w, n)}
		switch p := rng.IntN(10); {
		case p < 4:
			op.Kind, op.Value = Get, ""
		case p < 7:
			op.Kind = Put
		default:
			op.Kind, op.Expect = CAS, last[key]
		}
		if op = l.do(op); op.Known {
			switch {
			case op.Kind == Put || op.Swapped:
				last[key] = op.Value
			default:
				last[key] = op.Read
			}
		}
		timer.Reset(l.opts.Interval)
	}
}

// do runs op with its deadline and records it: its call before sending (so
// a write in flight at Stop is still in the history), its outcome after.
func (l *Load) do(op Op) Op {
	ctx, cancel := context.WithTimeout(l.opCtx, l.opts.OpTimeout)
	defer cancel()
	l.mu.Lock()
	idx := len(l.ops)
	op.Call = time.Since(l.start)
	l.ops = append(l.ops, op)
	l.state = append(l.state, inFlight)
	l.mu.Unlock()

	err := l.send(ctx, &op)
	ret := time.Since(l.start)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.state[idx] = returned
	switch {
	case err == nil:
		op.Known, op.Return = true, ret
	case op.Kind == Get:
		// A failed read has no effect: drop it rather than guess what it saw.
		l.state[idx] = dropped
		l.failedGets++
	default:
		op.Known, op.Return, op.Err = false, ret, err.Error()
	}
	l.ops[idx] = op
	return op
}

func (l *Load) send(ctx context.Context, op *Op) error {
	switch op.Kind {
	case Put:
		resp, err := l.cli.Put(ctx, op.Key, op.Value)
		if err != nil {
			return err
		}
		op.Revision = resp.Header.GetRevision()
	case Get:
		resp, err := l.cli.Get(ctx, op.Key) // linearizable: the default
		if err != nil {
			return err
		}
		op.Revision = resp.Header.GetRevision()
		if len(resp.Kvs) > 0 {
			op.Read = string(resp.Kvs[0].Value)
		}
	case CAS:
		// etcd fails a value compare on a missing key, so "absent" is
		// expressed as "never created".
		cmp := clientv3.Compare(clientv3.Value(op.Key), "=", op.Expect)
		if op.Expect == "" {
			cmp = clientv3.Compare(clientv3.CreateRevision(op.Key), "=", 0)
		}
		resp, err := l.cli.Txn(ctx).If(cmp).
			Then(clientv3.OpPut(op.Key, op.Value)).
			Else(clientv3.OpGet(op.Key)).Commit()
		if err != nil {
			return err
		}
		op.Revision = resp.Header.GetRevision()
		op.Swapped = resp.Succeeded
		if !resp.Succeeded && len(resp.Responses) == 1 {
			if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
				op.Read = string(kvs[0].Value)
			}
		}
	}
	return nil
}
