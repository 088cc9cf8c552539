package watchdog

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	bolt "go.etcd.io/bbolt"
)

// These tests observe a member no etcd answers for: the watchdog's own
// rules (deep check, sample gap) without a cluster.

// heldDataDir is a data dir a bootstrapping member leaves for a moment: its
// db exists (held by us, as etcd holds it) and its WAL not yet. The layout
// check says corrupt; the deep check says in-use.
func heldDataDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(dir, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(dir, "member", "snap", "db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return dir
}

func newTestWatchdog(t *testing.T, dataDir, clientURL string, poll, grace time.Duration) *Watchdog {
	t.Helper()
	w, err := New(Config{Identity: Identity{Name: "m1", PeerURLs: []string{"http://127.0.0.1:1"},
		ClientURL: clientURL, DataDir: dataDir}, PollInterval: poll, GracePeriod: grace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// refusedURL is a client URL whose port refuses connections.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	return url
}

// silentURL is a client URL that accepts connections and never answers:
// every request to it waits out the probe timeout (a hung member).
func silentURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return "http://" + ln.Addr().String()
}

func TestLayoutCorruptDataDirIsConfirmedByTheDeepCheck(t *testing.T) {
	ctx := t.Context()
	held := heldDataDir(t)
	r := assess(newTestWatchdog(t, held, refusedURL(t), time.Second, time.Minute)).Observe(ctx, time.Now())
	if l := r.Observation.Local; l.DataDirClass != "in-use" || !l.DataDirVerified {
		t.Fatalf("held dir: class %s verified %v (%s), want in-use, verified", l.DataDirClass, l.DataDirVerified, l.DataDirDetail)
	}
	if r.Verdict.State == memberstate.Lost {
		t.Fatalf("held dir: lost at once (%s)", r.Verdict.Detail)
	}

	broken := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(broken, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	r = assess(newTestWatchdog(t, broken, refusedURL(t), time.Second, time.Minute)).Observe(ctx, time.Now())
	if l := r.Observation.Local; l.DataDirClass != "corrupt" || !l.DataDirVerified {
		t.Fatalf("broken dir: class %s verified %v (%s), want corrupt, verified", l.DataDirClass, l.DataDirVerified, l.DataDirDetail)
	}
	if r.Verdict.State != memberstate.Lost {
		t.Fatalf("confirmed corrupt dir of a stopped member: %s (%s), want lost at once", r.Verdict.State, r.Verdict.Detail)
	}
}

// "Continuously unhealthy" needs continuous observation: an agent that did
// not look for a long while (stalled, or a recovery held) starts the run
// afresh.
func TestSampleGapRestartsTheRun(t *testing.T) {
	ctx := t.Context()
	w := assess(newTestWatchdog(t, heldDataDir(t), refusedURL(t), time.Second, 3*time.Second))
	t0 := time.Now()
	if r := w.Observe(ctx, t0); r.Verdict.State != memberstate.Down {
		t.Fatalf("first poll: %s (%s), want down", r.Verdict.State, r.Verdict.Detail)
	}
	later := t0.Add(time.Hour)
	r := w.Observe(ctx, later)
	if r.Verdict.State != memberstate.Down || !r.Verdict.TroubleSince.Equal(later) {
		t.Fatalf("after an hour unobserved: %s since %s (%s), want down since the new sample",
			r.Verdict.State, r.Verdict.TroubleSince, r.Verdict.Detail)
	}
}

// Polls slower than 3 poll intervals (every request to a hung member waits
// out the probe timeout) must not restart the run each time: the member
// still becomes lost after the grace period.
func TestSlowPollsStillReachLost(t *testing.T) {
	ctx := t.Context()
	poll, grace := 50*time.Millisecond, time.Second
	w := newTestWatchdog(t, heldDataDir(t), silentURL(t), poll, grace)
	w.cfg.ProbeTimeout = 300 * time.Millisecond // each poll: member list + local probe, both time out
	w.clients = newClients(nil, w.cfg.ProbeTimeout)
	aw := assess(w)
	start := time.Now()
	for i := 0; ; i++ {
		at := time.Now()
		r := aw.Observe(ctx, at)
		took := time.Since(at)
		if took <= 3*poll {
			t.Fatalf("poll %d took %s: not a slow poll, the test proves nothing", i, took)
		}
		if r.Verdict.State == memberstate.Lost {
			t.Logf("lost after %d polls of about %s, %s", i+1, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 10*grace {
			t.Fatalf("still %s after %s (last poll took %s): the slow polls restart the run", r.Verdict.State, time.Since(start), took)
		}
	}
}

// assessing is the agent's first two stages over a watchdog (observe, then
// assess), for tests of the watchdog's rules that show in the verdict.
type assessing struct {
	w *Watchdog
	a *memberstate.Assessor
}

func assess(w *Watchdog) *assessing { return &assessing{w, memberstate.NewAssessor(w.cfg.GracePeriod)} }

func (x *assessing) Observe(ctx context.Context, now time.Time) memberstate.Result {
	o := x.w.Observe(ctx, now)
	return x.a.Assess(o, x.w.SampleGap())
}
