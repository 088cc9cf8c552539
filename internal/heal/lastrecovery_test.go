package heal

import (
	"context"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/plan"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// lastRecoveryFails wraps fakeReporter: SetLastRecovery returns errs in
// turn (then succeeds), counting the calls.
type lastRecoveryFails struct {
	*fakeReporter
	errs  []error
	calls int
}

func (r *lastRecoveryFails) SetLastRecovery(ctx context.Context, lr nodereport.LastRecovery) error {
	r.calls++
	if len(r.errs) > 0 {
		err := r.errs[0]
		r.errs = r.errs[1:]
		return err
	}
	return r.fakeReporter.SetLastRecovery(ctx, lr)
}

// The last-recovery annotation is how a person learns a request's answer:
// a failed write is retried once, and a second failure is logged, on both
// paths that write it (a refused request, a closed recovery).
func TestSetLastRecoveryErrorsAreRetriedOnceAndLogged(t *testing.T) {
	req := &plan.Request{Action: "rejoin"}
	for _, tc := range []struct {
		name string
		run  func(r *rig)
	}{
		{"refused request", func(r *rig) {
			r.h.Consider(context.Background(), cluster3(memberstate.Healthy, 1, 2), req) // would lose quorum
		}},
		{"recovery closed", func(r *rig) {
			r.obs.res = []memberstate.Result{cluster3(memberstate.Lost, 2)}
			r.h.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil) // majority lost after the Lease
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, failures := range []int{1, 2} {
				r := newRig(t, cluster3(memberstate.Lost, 2))
				core, logs := observer.New(zap.WarnLevel)
				r.h.log = zap.New(core)
				rep := &lastRecoveryFails{fakeReporter: r.rep}
				for range failures {
					rep.errs = append(rep.errs, errBoom)
				}
				r.h.reporter = rep
				tc.run(r)
				if rep.calls != 2 {
					t.Fatalf("%d failures: SetLastRecovery called %d times, want 2 (one retry)", failures, rep.calls)
				}
				logged := logs.FilterMessageSnippet("last-recovery").Len()
				if failures == 1 && (len(r.rep.last) != 1 || logged != 0) {
					t.Fatalf("retried write: %d annotations written, %d error lines; want 1 and none", len(r.rep.last), logged)
				}
				if failures == 2 && logged != 1 {
					t.Fatalf("both writes failed and %d lines say so, want 1: %v", logged, logs.All())
				}
			}
		})
	}
}
