package heal

import (
	"context"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// Review finding (issue 10): clearPending is persisted only into a CLOSED journal
// (persistClearPending returns while the journal is active). A manual
// request whose trigger could not be cleared at begin, an agent restarted
// mid-heal (rolling update), and an attempt that then fails: the restarted
// agent has forgotten the pending clear, close() clears only on success,
// and the still-present trigger is executed a second time.
func TestManualRequestNeverExecutedTwiceAcrossARestartAndAFailure(t *testing.T) {
	healthy := cluster3(memberstate.Healthy, 1, 2, 3)
	r := newRig(t, healthy)
	// Every ClearRequest fails (the API refuses this patch for a while):
	// the trigger stays on the Node throughout.
	r.rep.clearErrs = []error{errBoom, errBoom, errBoom, errBoom, errBoom, errBoom, errBoom, errBoom}
	ctx, cancel := context.WithCancel(context.Background())
	r.obs.onObserve = func(n int) {
		if n == 1 {
			cancel() // SIGTERM right after the Lease was taken
		}
	}
	req := &plan.Request{Action: "rejoin"}
	r.h.Consider(ctx, healthy, req)
	if j := r.journal(t); !j.Active() {
		t.Fatalf("setup: journal not open after shutdown: %+v", j)
	}
	stopsBefore := r.rt.stops
	// The restarted agent resumes; the attempt fails (here: the snapshot
	// source cannot be streamed from, five times).
	r.obs.onObserve = nil
	restarted := New(r.h.cfg, r.obs, func(uint64) (Lease, error) { return r.lease, nil }, r.rt, r.rep, r.m)
	out := restarted.Consider(context.Background(), cluster3(memberstate.Lost, 2, 3), nil)
	if out.Result != journal.ResultFailed {
		t.Fatalf("setup: resumed attempt %q (%+v), want failed", out.Result, out.Decision)
	}
	// The trigger is still on the Node: the agent hands it in again.
	r.obs.res = []memberstate.Result{healthy}
	out = restarted.Consider(context.Background(), healthy, req)
	if r.rt.stops > stopsBefore || (out.Result != "" && !out.Answered) {
		t.Errorf("the same manual request was executed a second time: outcome %q %+v, stops %d -> %d",
			out.Result, out.Decision, stopsBefore, r.rt.stops)
	}
}
