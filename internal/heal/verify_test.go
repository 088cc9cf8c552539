package heal

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// watchedCluster records the deadline of each HashKV and how many ran at
// once.
type watchedCluster struct {
	*fakeCluster
	mu                sync.Mutex
	inFlight, maxSeen int
	deadlines         []time.Duration
}

func (c *watchedCluster) HashKV(ctx context.Context, _ []string, _ string, _ int64) (uint32, int64, error) {
	c.mu.Lock()
	c.inFlight++
	c.maxSeen = max(c.maxSeen, c.inFlight)
	if dl, ok := ctx.Deadline(); ok {
		c.deadlines = append(c.deadlines, time.Until(dl))
	}
	c.mu.Unlock()
	time.Sleep(10 * time.Millisecond) // a read in progress, for another call to overlap with
	c.mu.Lock()
	c.inFlight--
	c.mu.Unlock()
	return 42, 0, nil
}

// The verify step hashes every voter's whole keyspace (HashKV). Each call
// had 5 s whatever the db's size: a db of several GiB would never verify.
// Now the deadline grows with the db. The voters are still asked one at a
// time: a HashKV holds its member's backend read transaction, and the
// member applies no write until it ends; asked at once, every member would
// stall the cluster's writes together.
func TestTheVoterHashesHaveADeadlineForTheirDBAndOneRunsAtATime(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	for i := range res.Observation.Members {
		res.Observation.Members[i].DBSize = 8 << 30
	}
	r := newRig(t, res)
	wc := &watchedCluster{fakeCluster: r.cluster}
	r.h.cluster = wc
	jd, err := r.h.verify(context.Background(), res, 0xa1, "")
	if err != nil || jd.Verdict != plan.HashEqual {
		t.Fatalf("verify: %q (%s), %v: want equal", jd.Verdict, jd.Detail, err)
	}
	if len(wc.deadlines) != 3 {
		t.Fatalf("%d HashKV calls with a deadline, want 3 (one per voter)", len(wc.deadlines))
	}
	for _, d := range wc.deadlines {
		if d < time.Minute {
			t.Errorf("a HashKV of an 8 GiB db was given %s, want at least a minute", d.Round(time.Second))
		}
	}
	if wc.maxSeen != 1 {
		t.Errorf("%d HashKV calls ran at once, want 1: each stalls its member's writes", wc.maxSeen)
	}
}

// The verify step had 2 min whatever the dbs: three voters of 8 GiB, each
// hashed one after the other under its own deadline (82 s), could never
// finish inside it, and the step failed at every attempt. Its deadline now
// covers the revision read and every voter's HashKV in turn.
func TestTheVerifyStepHasTimeForEveryVotersHashOneAfterTheOther(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	for i := range res.Observation.Members {
		res.Observation.Members[i].DBSize = 8 << 30
	}
	r := newRig(t, res)
	need := 5 * time.Second
	for _, v := range res.Observation.Members {
		need += hashDeadline(v.DBSize)
	}
	if got := r.h.stepDeadline(plan.Decision{Action: plan.Verify}, res.Observation); got < need {
		t.Errorf("verify step deadline %s for three 8 GiB voters, want at least %s", got, need)
	}
	small := cluster3(memberstate.Healthy, 1, 2, 3)
	if got, want := r.h.stepDeadline(plan.Decision{Action: plan.Verify}, small.Observation), r.h.stepTimeout(plan.Verify); got != want {
		t.Errorf("verify step deadline %s for small dbs, want the step's own %s", got, want)
	}
	if got, want := r.h.stepDeadline(plan.Decision{Action: plan.Promote}, res.Observation), r.h.stepTimeout(plan.Promote); got != want {
		t.Errorf("promote's deadline %s depends on the dbs, want %s", got, want)
	}
}

// A member started with its client URLs set aside is verified only once it
// serves on its own again: before its restart, the process that answers is
// the one the kubelet is about to replace (issue 40).
func TestAMemberIsVerifiedOnlyOnceBackOnItsOwnClientURLs(t *testing.T) {
	const private = "https://10.0.0.1:12379"
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	res.Observation.Members[0].ClientURLs = append(res.Observation.Members[0].ClientURLs, private)
	r := newRig(t, res)
	if jd, err := r.h.verify(context.Background(), res, 0xa1, private); err != nil || jd.Verdict != plan.HashNotYet {
		t.Fatalf("still on %s: verify %q (%s), %v; want not yet", private, jd.Verdict, jd.Detail, err)
	}
	res.Observation.Members[0].ClientURLs = res.Observation.Members[0].ClientURLs[:1]
	if jd, err := r.h.verify(context.Background(), res, 0xa1, private); err != nil || jd.Verdict != plan.HashEqual {
		t.Fatalf("back on its own: verify %q (%s), %v; want equal", jd.Verdict, jd.Detail, err)
	}
}

// progressCluster records, at each HashKV, what the board says of the
// verify step.
type progressCluster struct {
	*fakeCluster
	h    *Healer
	seen []int64 // bytes left, as the verify step's estimate said
}

func (c *progressCluster) HashKV(context.Context, []string, string, int64) (uint32, int64, error) {
	for _, e := range c.h.cfg.Progress.Estimates(time.Now()) {
		if e.Step == stepVerify {
			c.seen = append(c.seen, e.Left)
		}
	}
	return 42, 0, nil
}

// Issue 44: the verify says how far it is, in bytes of the voters' dbs
// hashed (a HashKV of a db of several GiB takes seconds), and says nothing
// once done.
func TestTheVerifySaysHowFarItIs(t *testing.T) {
	res := cluster3(memberstate.Healthy, 1, 2, 3)
	for i := range res.Observation.Members {
		res.Observation.Members[i].DBSize = 1 << 30
	}
	r := newRig(t, res)
	pc := &progressCluster{fakeCluster: r.cluster, h: r.h}
	r.h.cluster = pc
	if jd, err := r.h.verify(context.Background(), res, 0xa1, ""); err != nil || jd.Verdict != plan.HashEqual {
		t.Fatalf("verify: %q (%s), %v: want equal", jd.Verdict, jd.Detail, err)
	}
	want := []int64{3 << 30, 2 << 30, 1 << 30}
	if !slices.Equal(pc.seen, want) {
		t.Fatalf("bytes left at each voter's HashKV: %v, want %v", pc.seen, want)
	}
	for _, e := range r.h.cfg.Progress.Estimates(time.Now()) {
		if e.Step == stepVerify {
			t.Fatalf("the verify is done and still says %s", e)
		}
	}
}
