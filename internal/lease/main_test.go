package lease_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/lab/labtest"
	"github.com/etcd-agent/etcd-agent/internal/lease"
)

// shared is the one real etcd + kube-apiserver every test in this package
// uses; tests keep apart by using objects of their own.
var shared = labtest.NewShared("lease", lab.Options{Nodes: 1})

func TestMain(m *testing.M) { shared.Main(m) }

func restConfig(t *testing.T) *rest.Config { return shared.RestConfig(t) }

func newClient(t *testing.T) kubernetes.Interface { return shared.KubeClient(t) }

// partition is a client whose connection to the API server can be cut, the
// way a network partition or a frozen node cuts an agent off.
type partition struct{ cut atomic.Bool }

func (p *partition) client(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := restConfig(t)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if p.cut.Load() {
				return nil, errors.New("test partition: connection cut")
			}
			return rt.RoundTrip(r)
		})
	})
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closedPortClient points at a port nothing listens on.
func closedPortClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	kc, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// leaseName is unique per test (and per run, should a lab be reused).
func leaseName(t *testing.T) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", t.Name(), time.Now().UnixNano())
	return lease.Name(h.Sum64())
}

// newLease returns a handle for holder on the Lease name; it is released
// when the test ends so that no renewer outlives the test.
func newLease(t *testing.T, kc kubernetes.Interface, name, holder string, ttl time.Duration) *lease.Lease {
	t.Helper()
	l, err := lease.New(lease.Config{Client: kc, Namespace: lab.AgentNamespace, Name: name, Holder: holder, TTL: ttl,
		Log: zaptest.NewLogger(t).Named(holder)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Handles cut off from the API cannot clear the Lease; stopping
		// their renewer is all that matters here.
		if err := l.Release(ctx); err != nil && !errors.Is(err, lease.ErrAPIUnavailable) {
			t.Errorf("release %s: %v", holder, err)
		}
	})
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	labtest.Eventually(t, d, what, cond)
}

func requireErrorIs(t *testing.T, err, target error, mentions ...string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}
