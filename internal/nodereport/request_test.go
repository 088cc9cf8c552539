package nodereport_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-agent/etcd-agent/internal/nodereport"
)

// `etcd-agent recover` waits for the agent's answer through a watch of its
// Node (issue 42): it sees the answer when the API sends it and never asks
// for the Node again after its request (before, it read the Node once a
// second until the answer was there).
func TestRecoverWaitsForTheAnswerThroughAWatch(t *testing.T) {
	kc, ctx := newClient(t), ctxFor(t, 60*time.Second)
	node := newNode(t, kc, nil)
	rep := nodereport.NewReporter(kc, node.Name, "etcd-agent-test", zaptest.NewLogger(t))
	t.Cleanup(rep.Shutdown)
	want := nodereport.LastRecovery{Request: "rejoin (dry run)", Result: nodereport.ResultRefused, Reason: "quorum-at-risk", Phase: "plan",
		StartedAt: time.Now().UTC().Truncate(time.Second), FinishedAt: time.Now().UTC().Truncate(time.Second), Message: "the agent's answer"}

	// The agent: it answers the request it is sent, as the daemon does.
	agentCtx, stopAgent := context.WithCancel(ctx)
	var answered sync.WaitGroup
	answered.Add(1)
	var once sync.Once
	go func() {
		_ = nodereport.WatchRequests(agentCtx, kc, node.Name, func(req nodereport.Request, err error) {
			once.Do(func() {
				defer answered.Done()
				if err != nil || !req.DryRun {
					t.Errorf("the agent got request %+v, %v; want a dry run", req, err)
				}
				if err := rep.ClearRequest(ctx); err != nil {
					t.Error(err)
				}
				if err := rep.SetLastRecovery(ctx, want); err != nil {
					t.Error(err)
				}
			})
		})
	}()
	t.Cleanup(stopAgent)

	// The CLI, with every request it sends to the API counted.
	var patched atomic.Bool
	var readsAfter atomic.Int32
	rc := restConfig(t)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch {
			case r.Method == http.MethodPatch:
				patched.Store(true)
			case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/"+node.Name && patched.Load():
				readsAfter.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	cli, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := nodereport.RequestRecovery(ctx, cli, node.Name, nodereport.Request{Action: nodereport.ActionRejoin, DryRun: true}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	answered.Wait()
	if got.Message != want.Message || got.Result != want.Result || got.Reason != want.Reason {
		t.Fatalf("answer %+v, want %+v", got, want)
	}
	if n := readsAfter.Load(); n != 0 {
		t.Fatalf("the wait read the Node %d times after its request; want a watch, no polls", n)
	}
}

// A wait with no agent to answer ends at its timeout, with an error that
// says the request stays on the Node.
func TestRecoverWithNoAgentEndsAtItsTimeout(t *testing.T) {
	kc, ctx := newClient(t), ctxFor(t, 30*time.Second)
	node := newNode(t, kc, nil)
	_, err := nodereport.RequestRecovery(ctx, kc, node.Name, nodereport.Request{Action: nodereport.ActionRejoin}, 500*time.Millisecond)
	if err == nil {
		t.Fatal("no error without an agent")
	}
	if want := "the request stays on the Node"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	if _, ok := getNode(t, kc, node.Name).Annotations[nodereport.AnnotationRecover]; !ok {
		t.Fatal("the request is gone from the Node")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
