package invariant

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
)

// Checker runs the writer, the quorum prober and the membership watch around
// a scenario; Finish stops them and checks every invariant.
type Checker struct {
	Writer  *Writer
	prober  *Prober
	members *MembershipWatch
	cli     *clientv3.Client
	started time.Time
}

// Report is what a scenario's run looked like.
type Report struct {
	Writes        WriterReport
	APIp50        time.Duration
	APIp99        time.Duration
	Outages       []Outage
	Probes        int
	MaxLearners   int
	Memberships   []string
	HashKV        map[string]uint32
	Duration      time.Duration
	QuorumLostFor time.Duration
}

// String summarises the report in one line for test logs.
func (r Report) String() string {
	return fmt.Sprintf("api writes %d (failed %d, p50 %s, p99 %s), etcd writes %d (failed %d), probes %d, longest outage %s, max learners %d, hashkv %v, took %s",
		r.Writes.APIAttempted, r.Writes.APIFailed, r.APIp50.Round(time.Millisecond), r.APIp99.Round(time.Millisecond),
		r.Writes.EtcdAttempted, r.Writes.EtcdFailed, r.Probes, r.QuorumLostFor.Round(time.Millisecond), r.MaxLearners, r.HashKV, r.Duration.Round(time.Millisecond))
}

// Start begins writing (kc may be nil for an etcd-only lab) and observing.
// cli must reach every member of the cluster.
func Start(ctx context.Context, kc kubernetes.Interface, cli *clientv3.Client) (*Checker, error) {
	w, err := StartWriter(ctx, kc, cli, 50*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return &Checker{Writer: w, prober: StartProber(ctx, cli, 200*time.Millisecond),
		members: StartMembershipWatch(ctx, cli, 100*time.Millisecond), cli: cli, started: time.Now()}, nil
}

// Options choose which invariants Finish enforces beyond the always-on ones
// (no acknowledged write lost, HashKV equal, at most one learner).
type Options struct {
	// AllowQuorumLoss is for scenarios that break quorum on purpose.
	AllowQuorumLoss bool
	// AllowFailedWrites is for scenarios in which writes are expected to fail.
	AllowFailedWrites bool
}

// Finish stops the checker and returns its report with an error naming every
// invariant that was broken.
func (c *Checker) Finish(ctx context.Context, o Options) (Report, error) {
	var r Report
	r.Writes = c.Writer.Stop()
	r.Outages, r.Probes = c.prober.Stop()
	r.MaxLearners, r.Memberships = c.members.Stop()
	r.Duration = time.Since(c.started)
	r.APIp50, r.APIp99 = Percentile(r.Writes.APILatencies, 50), Percentile(r.Writes.APILatencies, 99)
	var errs []error
	for _, o := range r.Outages {
		r.QuorumLostFor = max(r.QuorumLostFor, o.Duration())
	}
	if !o.AllowQuorumLoss && r.QuorumLostFor > QuorumLossThreshold {
		errs = append(errs, fmt.Errorf("quorum lost: linearizable reads failed for %s (> %s): %v", r.QuorumLostFor, QuorumLossThreshold, r.Outages))
	}
	if !o.AllowFailedWrites && (r.Writes.APIFailed > 0 || r.Writes.EtcdFailed > 0) {
		errs = append(errs, fmt.Errorf("writes failed: api %d/%d, etcd %d/%d: %s", r.Writes.APIFailed, r.Writes.APIAttempted,
			r.Writes.EtcdFailed, r.Writes.EtcdAttempted, firstFailures(r.Writes.Failures, 5)))
	}
	if r.MaxLearners > 1 {
		errs = append(errs, fmt.Errorf("%d learners at once; memberships seen: %v", r.MaxLearners, r.Memberships))
	}
	vctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := c.Writer.VerifyAcked(vctx, r.Writes); err != nil {
		errs = append(errs, err)
	}
	h, err := CheckHashKV(vctx, c.cli, 30*time.Second)
	r.HashKV = h
	if err != nil {
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

func firstFailures(fs []Failure, n int) string {
	var out []string
	for i, f := range fs {
		if i == n {
			break
		}
		out = append(out, fmt.Sprintf("%s %s: %s", f.At.Format("15:04:05.000"), f.Via, f.Err))
	}
	return strings.Join(out, "; ")
}
