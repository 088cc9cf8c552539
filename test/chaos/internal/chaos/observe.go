package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/invariant"
	"github.com/etcd-agent/etcd-agent/internal/lease"
	"github.com/etcd-agent/etcd-agent/test/chaos/internal/linearize"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// probeInterval is how often every member is asked for a linearizable read.
const probeInterval = 200 * time.Millisecond

// observers is everything that watches the run from outside the agents.
type observers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startObservers starts the API and etcd writers, the linearizability
// load, the availability prober, the member-list watch, the Lease watch,
// and the identity and data-dir scans.
func (r *runner) startObservers(ctx context.Context) error {
	var eps []string
	for _, n := range r.l.Spec.Nodes {
		eps = append(eps, n.ClientURL)
	}
	r.clients = &clientCache{m: map[string]*clientv3.Client{}, mk: r.l.EtcdClientFor, eps: eps}
	cli, err := r.clients.all(r.l)
	if err != nil {
		return err
	}
	kc, err := r.l.KubeClient()
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	st, err := cli.Status(sctx, eps[0])
	cancel()
	if err != nil {
		return fmt.Errorf("read the cluster ID: %w", err)
	}
	clusterID := st.Header.ClusterId
	octx, ocancel := context.WithCancel(ctx)
	r.obs = &observers{cancel: ocancel}
	if r.writer, err = invariant.StartWriter(octx, kc, cli, 100*time.Millisecond); err != nil {
		return err
	}
	r.load = linearize.Start(octx, cli, linearize.Options{Seed: r.o.Seed})
	r.prober = invariant.StartProbing(octx, r.anyMemberServes(eps), probeInterval)
	r.members = invariant.StartMembershipWatch(octx, cli, 100*time.Millisecond)
	r.lease = startLeaseWatch(octx, kc, lease.Name(clusterID), 250*time.Millisecond)
	r.ledger = newLedger(clusterID)
	r.ledger.scan(*r.nodes.Load()) // the lab's own dirs, before any fault
	r.ids = newIdentityWatch(func(url string) (*clientv3.Client, error) { return r.clients.get(url) })
	r.obs.every(octx, 500*time.Millisecond, func(ctx context.Context) {
		removed := RemovedAt(r.members.History())
		r.ids.round(ctx, *r.nodes.Load(), func(id uint64) time.Time { return removed[id] })
	})
	r.obs.every(octx, time.Second, func(context.Context) { r.ledger.scan(*r.nodes.Load()) })
	return nil
}

// every calls f every interval until ctx ends.
func (o *observers) every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			f(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// anyMemberServes probes every member's own URL at once: the cluster is
// available when any of them serves a linearizable read (a client's
// failover away from a hung member is not the cluster's outage).
func (r *runner) anyMemberServes(eps []string) func(context.Context) error {
	return func(ctx context.Context) error {
		errs := make(chan error, len(eps))
		for _, ep := range eps {
			go func() {
				cli, err := r.clients.get(ep)
				if err == nil {
					_, err = cli.Get(ctx, "health-probe")
				}
				errs <- err
			}()
		}
		var all []error
		for range eps {
			err := <-errs
			if err == nil {
				return nil
			}
			all = append(all, err)
		}
		return errors.Join(all...)
	}
}

func (r *runner) stopObservers() {
	if r.obs != nil {
		r.obs.cancel()
		r.obs.wg.Wait()
	}
}

// leaseWatch reads the recovery Lease every interval.
type leaseWatch struct {
	mu      sync.Mutex
	samples []LeaseSample
	errs    int
	done    chan struct{}
}

func startLeaseWatch(ctx context.Context, kc kubernetes.Interface, name string, interval time.Duration) *leaseWatch {
	w := &leaseWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			gctx, cancel := context.WithTimeout(ctx, time.Second)
			l, err := kc.CoordinationV1().Leases(lab.AgentNamespace).Get(gctx, name, metav1.GetOptions{})
			cancel()
			now := time.Now()
			w.mu.Lock()
			if err != nil {
				w.errs++ // the API is down, or no agent has made the Lease yet
			} else {
				s := LeaseSample{At: now}
				if l.Spec.HolderIdentity != nil {
					s.Holder = *l.Spec.HolderIdentity
				}
				if l.Spec.AcquireTime != nil {
					s.Acquired = l.Spec.AcquireTime.Time
				}
				if l.Spec.RenewTime != nil {
					s.Renewed = l.Spec.RenewTime.Time
				}
				if l.Spec.LeaseDurationSeconds != nil {
					s.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
				}
				w.samples = append(w.samples, s)
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *leaseWatch) result() []LeaseSample {
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]LeaseSample(nil), w.samples...)
}
