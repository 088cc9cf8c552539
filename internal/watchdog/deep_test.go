package watchdog

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// stoppedLayout makes a data dir whose layout is ok (a WAL segment, a db),
// so that a member not serving gets the deep check.
func stoppedLayout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{"member/wal/0000000000000000-0000000000000000.wal": "wal", "member/snap/db": "db"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A deep check that does not end (seen in CI, e2e
// TestAClusterOnMixedDataDirLayouts: an inspection child hung on a db
// corrupted under it, and node2's agent, its loop's context without a
// deadline, stayed in one observation for two minutes, silent, until it
// was shut down) never holds up the agent's loop: while Run polls, an
// observation waits for the check a bounded while, then goes on with the
// layout verdict, unverified, and says so; a later observation takes the
// check's verdict once it ends.
func TestObserveDoesNotWaitOutADeepCheckThatDoesNotEnd(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	w, err := New(Config{Identity: Identity{Name: "b", PeerURLs: []string{"http://127.0.0.1:1"}, ClientURL: "http://127.0.0.1:1",
		DataDir: stoppedLayout(t)}, PollInterval: time.Hour, ProbeTimeout: time.Second, Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	release := make(chan struct{})
	w.deep.check = func(ctx context.Context, _ localdisk.Dirs, _ localdisk.Expect) localdisk.Result {
		select {
		case <-release:
			return localdisk.Result{Class: localdisk.ClassCorrupt, Detail: "db damaged", Verified: true}
		case <-ctx.Done():
			return localdisk.Result{Class: localdisk.ClassOK, Detail: "deep check not finished: " + ctx.Err().Error()}
		}
	}
	w.deep.wait = 200 * time.Millisecond
	w.running.Store(true) // as under Run

	observed := make(chan observation.Observation, 1)
	go func() { observed <- w.Observe(context.Background(), time.Now()) }() // the loop's context: no deadline
	var o observation.Observation
	select {
	case o = <-observed:
	case <-time.After(10 * time.Second):
		close(release) // let the observation go
		t.Fatal("the observation waited on a deep check that does not end past 10s (its context has no deadline)")
	}
	if o.Local.DataDirClass != string(localdisk.ClassOK) || o.Local.DataDirVerified || !strings.Contains(o.Local.DataDirDetail, "deep check running") {
		t.Fatalf("data dir %q verified=%v (%s), want the layout's ok, unverified, saying the deep check runs", o.Local.DataDirClass,
			o.Local.DataDirVerified, o.Local.DataDirDetail)
	}
	if n := logs.FilterMessageSnippet("deep check").FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Fatalf("%d warnings about the deep check, want 1: %v", n, logs.All())
	}

	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		o = w.Observe(context.Background(), time.Now())
		if o.Local.DataDirClass == string(localdisk.ClassCorrupt) && o.Local.DataDirVerified {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the check's verdict never taken: data dir %q verified=%v (%s)", o.Local.DataDirClass, o.Local.DataDirVerified, o.Local.DataDirDetail)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := logs.FilterMessageSnippet("deep check").FilterLevelExact(zapcore.InfoLevel).Len(); n != 1 {
		t.Fatalf("%d lines saying the slow deep check ended, want 1: %v", n, logs.All())
	}
}

// A one-shot observation (`status`, the gate: no Run, no next poll) waits
// for the deep check's verdict.
func TestAOneShotObservationWaitsForTheDeepCheck(t *testing.T) {
	w, err := New(Config{Identity: Identity{Name: "b", PeerURLs: []string{"http://127.0.0.1:1"}, ClientURL: "http://127.0.0.1:1",
		DataDir: stoppedLayout(t)}, PollInterval: time.Hour, ProbeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.deep.check = func(context.Context, localdisk.Dirs, localdisk.Expect) localdisk.Result {
		time.Sleep(300 * time.Millisecond)
		return localdisk.Result{Class: localdisk.ClassCorrupt, Detail: "db damaged", Verified: true}
	}
	w.deep.wait = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if o := w.Observe(ctx, time.Now()); o.Local.DataDirClass != string(localdisk.ClassCorrupt) || !o.Local.DataDirVerified {
		t.Fatalf("data dir %q verified=%v (%s), want the check's corrupt", o.Local.DataDirClass, o.Local.DataDirVerified, o.Local.DataDirDetail)
	}
}
