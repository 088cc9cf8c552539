package heal

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/journal"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/nodereport"
	"github.com/etcd-agent/etcd-agent/internal/peerseed"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Issue 44: the pre-change stream shows how far it is (bytes of the
// source's db), on the progress board the status file and the Node read,
// and in the step's metrics; both are gone once the stream ends.
func TestThePreChangeStreamShowsHowFarItIs(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	for i := range res.Observation.Members {
		res.Observation.Members[i].DBSize = 100 << 20
	}
	r := newRig(t, res)
	board := &progress.Board{}
	r.h.cfg.Progress = board
	r.cluster.removeErr = errBoom // the attempt ends after the snapshot
	var mid []progress.Estimate
	var ratio, eta float64
	r.h.streamTo = func(ctx context.Context, endpoint string, _ *tls.Config, dest string, _ uint64, count func(int64), _ ...peerseed.StreamOption) (peerseed.Snapshot, error) {
		count(20 << 20)
		count(30 << 20) // half the db
		mid = board.Estimates(r.h.now())
		ratio = testutil.ToFloat64(r.m.StepProgress.WithLabelValues("m1", stepPreChangeStream))
		eta = testutil.ToFloat64(r.m.StepETA.WithLabelValues("m1", stepPreChangeStream))
		count(50 << 20)
		if err := writeNew(dest, []byte("db")); err != nil {
			return peerseed.Snapshot{}, err
		}
		return peerseed.Snapshot{Path: dest, Size: 100 << 20, SHA256: "ab", Source: endpoint}, nil
	}
	r.h.Consider(context.Background(), res, nil)
	if len(mid) != 1 || mid[0].Step != stepPreChangeStream || mid[0].Total != 100<<20 || mid[0].Left != 50<<20 {
		t.Fatalf("board mid-stream: %+v; want the pre-change stream at 50 of 100 MiB", mid)
	}
	if ratio != 0.5 || eta < 0 {
		t.Fatalf("mid-stream metrics: progress %v, ETA %v s; want 0.5 and an ETA", ratio, eta)
	}
	if j := r.journal(t); len(j.Steps) != 1 || !strings.HasPrefix(j.Steps[0], "pre-change stream: 100 MiB in ") {
		t.Fatalf("journal steps %q: want what the stream did", j.Steps)
	}
	if lr := r.rep.last[len(r.rep.last)-1]; len(lr.Steps) != 1 || !strings.HasPrefix(lr.Steps[0], "pre-change stream: 100 MiB in ") {
		t.Fatalf("last-recovery steps %q: want what the stream did", lr.Steps)
	}
	if n := r.rep.count(nodereport.ReasonRecoveryProgress); n != 1 {
		t.Fatalf("%d %s Events for one stream; want one, once its rate was known", n, nodereport.ReasonRecoveryProgress)
	}
	if es := board.Estimates(r.h.now()); len(es) != 0 {
		t.Fatalf("board after the attempt: %+v; want nothing running", es)
	}
	if n := testutil.CollectAndCount(r.m.StepProgress) + testutil.CollectAndCount(r.m.StepETA); n != 0 {
		t.Fatalf("%d progress series after the attempt; want none", n)
	}
}

// Issue 44: the learner's catch-up is measured as its gap to the leader,
// and the wait's log line says how far it is.
func TestTheCatchUpWaitSaysHowFarTheLearnerIs(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	core, logs := observer.New(zap.InfoLevel)
	r.h.log = zap.New(core)
	board := &progress.Board{}
	r.h.cfg.Progress = board
	r.journalAt(t, "", "member-started", 0xa1, 0xa9)
	var steps []memberstate.Result
	for _, applied := range []uint64{1000, 4000, 7000} {
		res := rejoined(true)
		o := &res.Observation
		for i := range o.Members {
			o.Members[i].RaftIndex, o.Members[i].AppliedIndex = 10000, 10000
		}
		o.Members[len(o.Members)-1].AppliedIndex = applied
		steps = append(steps, res)
	}
	r.obs.res = steps
	r.h.cfg.ProgressEvery = 1 // every wait's line
	var seen []progress.Estimate
	r.obs.onObserve = func(int) { seen = append(seen, board.Estimates(r.h.now())...) }
	r.h.Consider(context.Background(), steps[0], nil)
	var last progress.Estimate
	for _, e := range seen {
		if e.Step == stepCatchUp {
			last = e
		}
	}
	if last.Total != 9000 || last.Left != 3000 || last.Rate <= 0 {
		t.Fatalf("catch-up seen on the board: %+v (all %+v); want 3,000 of 9,000 entries left at a rate", last, seen)
	}
	found := false
	for _, e := range logs.FilterMessage("recovery still waiting").All() {
		if p, ok := e.ContextMap()["progress"]; ok && p != "" {
			found = true
		}
	}
	if !found {
		t.Fatal("no 'recovery still waiting' line said how far the catch-up is")
	}
}

// Issue 44: a raft-mode learner receives the leader's db (etcd writes it to
// a temp file in member/snap, SaveDBFrom) before it serves. That is shown
// as the snapshot receive, in bytes of the leader's db, and it is progress
// for the stall clock (rule 4): a large db received for longer than the
// stall timeout is not a stalled learner (kubernetes/kubeadm#3287).
func TestARaftLearnerReceivingTheLeadersSnapshotShowsItAndIsNotStalled(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	board := &progress.Board{}
	r.h.cfg.Progress = board
	r.journalAt(t, "", "member-started", 0xa1, 0xa9)
	snapDir := filepath.Join(r.h.cfg.DataDir, "member", "snap")
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(snapDir, "tmp2786416538")
	var steps []memberstate.Result
	for range 4 {
		res := rejoined(false)
		for i := range res.Observation.Members {
			res.Observation.Members[i].DBSize = 400 << 20
		}
		steps = append(steps, res)
	}
	r.obs.res = steps
	var seen []progress.Estimate
	var progressAt []time.Time
	r.obs.onObserve = func(n int) {
		// 100 MiB more on disk at each of the first 3 observations (sparse).
		size := int64(min(n, 3)) * 100 << 20
		if err := os.Truncate(tmp, size); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(tmp, nil, 0o600); err != nil {
				t.Error(err)
			}
			_ = os.Truncate(tmp, size)
		}
		seen = append(seen, board.Estimates(r.h.now())...)
		if j, ok, _ := journal.Load(r.dir, "m1"); ok {
			progressAt = append(progressAt, j.LearnerProgressAt)
		}
	}
	r.h.Consider(context.Background(), steps[0], nil)
	var last progress.Estimate
	for _, e := range seen {
		if e.Step == stepSnapshotReceive {
			last = e
		}
	}
	if last.Total != 400<<20 || last.Left != 100<<20 {
		t.Fatalf("snapshot receive on the board: %+v (%d estimates seen); want 300 of the leader's 400 MiB received", last, len(seen))
	}
	moved := 0
	for i := 1; i < len(progressAt); i++ {
		if progressAt[i].After(progressAt[i-1]) {
			moved++
		}
	}
	if moved < 2 {
		t.Fatalf("the learner's progress time moved %d times in %d observations while the snapshot grew: want the stall clock reset by received bytes", moved, len(progressAt))
	}
}

// Issue 44: a step that stops moving says so as a Warning Event, once per
// stall (not at every look), and again if it stalls anew.
func TestAStalledStepIsAnEventOncePerStall(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	at := time.Date(2026, 12, 6, 19, 40, 0, 0, time.UTC)
	e := progress.Estimate{Step: stepPreChangeStream, Unit: progress.Bytes, Total: 100, Left: 50, ETA: -1, StalledSince: at, At: at.Add(20 * time.Second)}
	r.h.tell(e)
	r.h.tell(e)
	if n := r.rep.count(nodereport.ReasonRecoveryStepStalled); n != 1 {
		t.Fatalf("%d stall Events for one stall seen twice; want 1", n)
	}
	e.StalledSince, e.At = at.Add(time.Minute), at.Add(90*time.Second)
	r.h.tell(e)
	if n := r.rep.count(nodereport.ReasonRecoveryStepStalled); n != 2 {
		t.Fatalf("%d stall Events after a second stall; want 2", n)
	}
}

// Review finding: an agent without a reporter (static pods, no
// --node-name) streams with no Events to say: not a crash mid-stream.
func TestAStreamWithoutAReporterDoesNotCrash(t *testing.T) {
	res := cluster3(memberstate.Lost, 2, 3)
	for i := range res.Observation.Members {
		res.Observation.Members[i].DBSize = 100 << 20
	}
	r := newRig(t, res)
	r.h.reporter = nil
	r.cluster.removeErr = errBoom
	r.h.streamTo = func(ctx context.Context, endpoint string, _ *tls.Config, dest string, _ uint64, count func(int64), _ ...peerseed.StreamOption) (peerseed.Snapshot, error) {
		count(20 << 20)
		count(30 << 20)
		if err := writeNew(dest, []byte("db")); err != nil {
			return peerseed.Snapshot{}, err
		}
		return peerseed.Snapshot{Path: dest, Size: 50 << 20, SHA256: "ab", Source: endpoint}, nil
	}
	r.h.Consider(context.Background(), res, nil)
	if j := r.journal(t); !j.Phase.AtLeast("snapshotted") {
		t.Fatalf("journal phase %q: want the stream done", j.Phase)
	}
}

// Review finding (rule 4): only the same receive growing is progress. A
// learner that fails to apply what it received and is sent the db again
// (a new temp file, a little larger as the db grew) is not making progress,
// nor is a file seen anew after the agent restarted.
func TestOnlyTheSameReceiveGrowingResetsTheStallClock(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	snapDir := filepath.Join(r.h.cfg.DataDir, "member", "snap")
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		t.Fatal(err)
	}
	res := rejoined(false)
	for i := range res.Observation.Members {
		res.Observation.Members[i].DBSize = 400 << 20
	}
	j := journal.Record{ID: "j1", Member: "m1", NewMemberID: 0xa9} // rejoined's learner
	write := func(name string, size int64) {
		t.Helper()
		p := filepath.Join(snapDir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
	}
	at := func(s int) time.Time { return time.Date(2026, 12, 6, 20, 0, s, 0, time.UTC) }
	write("tmp1", 100<<20)
	r.h.trackLearner(&j, res, at(0))
	write("tmp1", 200<<20)
	r.h.trackLearner(&j, res, at(1))
	if !j.LearnerProgressAt.Equal(at(1)) {
		t.Fatalf("the receive grew and the stall clock says %s; want %s", j.LearnerProgressAt, at(1))
	}
	// Received, failed to apply, sent again: a new file, larger.
	if err := os.Remove(filepath.Join(snapDir, "tmp1")); err != nil {
		t.Fatal(err)
	}
	write("tmp2", 401<<20)
	r.h.trackLearner(&j, res, at(2))
	if !j.LearnerProgressAt.Equal(at(1)) {
		t.Fatalf("a new receive reset the stall clock to %s; want it left at %s", j.LearnerProgressAt, at(1))
	}
	// The agent restarted: the file seen anew is not progress either.
	r.h.meters.received = receiveSeen{}
	r.h.trackLearner(&j, res, at(3))
	if !j.LearnerProgressAt.Equal(at(1)) {
		t.Fatalf("a receive seen anew after a restart reset the stall clock to %s; want it left at %s", j.LearnerProgressAt, at(1))
	}
	r.h.stopMeters()
}

// Review finding: a stream's last sample racing the step's end does not
// bring its metric series back after the step ended.
func TestNoProgressSeriesOutlivesItsStep(t *testing.T) {
	r := newRig(t, cluster3(memberstate.Lost, 2, 3))
	for i := 0; i < 300; i++ {
		count, stop := r.h.meterStream(stepPreChangeStream, 100<<20, r.m.SnapshotBytesTotal.WithLabelValues("m1"))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for k := 0; k < 50; k++ {
				count(1 << 20)
			}
		}()
		stop()
		<-done
		if n := testutil.CollectAndCount(r.m.StepProgress) + testutil.CollectAndCount(r.m.StepETA); n != 0 {
			t.Fatalf("round %d: %d progress series after the step ended", i, n)
		}
	}
}
