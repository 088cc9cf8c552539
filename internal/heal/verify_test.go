package heal

import (
	"context"
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
	jd, err := r.h.verify(context.Background(), res, 0xa1)
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
