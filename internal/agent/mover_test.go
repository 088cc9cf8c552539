package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The mover runs in the observation loop: without a move-to on the Node
// (as the agent's watch says) it asks the API nothing, and after an API
// that did not answer it waits before it asks again, so that a hung API
// server never holds the loop up at every poll (which would also restart
// every grace period: the samples would come too far apart).
func TestTheMoverAsksTheAPINothingWithoutAMoveAndBacksOffAfterAnError(t *testing.T) {
	kc := fake.NewClientset()
	calls := 0
	kc.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		return true, nil, errors.New("the API server does not answer")
	})
	requested := false
	mv := &mover{kc: kc, node: "node1", stateDir: t.TempDir(), log: zap.NewNop(), requested: func() bool { return requested }}
	for range 3 {
		if mv.consider(context.Background(), memberstate.Result{}, nil) {
			t.Fatal("retired without a move")
		}
	}
	if calls != 0 {
		t.Fatalf("%d API calls without a move requested, want 0", calls)
	}
	requested = true
	for range 3 {
		mv.consider(context.Background(), memberstate.Result{}, nil)
	}
	if calls != 1 {
		t.Fatalf("%d API calls in three looks with the API failing, want 1 (then a back-off of %s)", calls, moveBackoff)
	}
}
