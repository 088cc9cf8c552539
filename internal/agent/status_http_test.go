package agent

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/metrics"
)

// /status serves every poll's report, with where the member's files lie
// and where its log stands on disk: what `status --cluster` asks each node
// for when the majority (and the Kubernetes API with it) is lost. The
// status file is written only on a change; the endpoint is fresh.
func TestStatusEndpointServesEveryPollsReport(t *testing.T) {
	get := func(base string) (int, Report) {
		t.Helper()
		u, q, _ := strings.Cut(base, "?")
		if q != "" {
			q = "?" + q
		}
		resp, err := http.Get(u + "/status" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r Report
		if resp.StatusCode == http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
		}
		return resp.StatusCode, r
	}
	serve := func(latest *atomic.Pointer[Report], stateDir string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var ready atomic.Bool
		srv := serveOn(ln, metrics.New(), &ready, statusOf(latest, Config{StateDir: stateDir}), false, zap.NewNop())
		t.Cleanup(func() { srv.Close() })
		return "http://" + ln.Addr().String()
	}
	// Pod members: one report each, asked by pod (status --cluster in
	// management mode), from its status file.
	pods := t.TempDir()
	if err := os.MkdirAll(filepath.Join(pods, "members", "clusters-a_etcd-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	podRep := Report{Where: &Where{Node: "n2", DataDir: "/pv/data"}}
	podRep.Observation.Local.Name = "etcd-1"
	b, _ := json.Marshal(podRep)
	if err := os.WriteFile(filepath.Join(pods, "members", "clusters-a_etcd-1", StatusFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	podBase := serve(nil, pods)
	for q, want := range map[string]int{"": http.StatusBadRequest, "?pod=etcd-1": http.StatusBadRequest, "?pod=clusters-a/etcd-2": http.StatusNotFound,
		"?pod=clusters-b/etcd-1": http.StatusNotFound} {
		if code, _ := get(podBase + q); code != want {
			t.Errorf("/status%s: %d, want %d", q, code, want)
		}
	}
	if code, got := get(podBase + "?pod=clusters-a/etcd-1"); code != http.StatusOK || got.Observation.Local.Name != "etcd-1" || got.Where == nil || got.Where.Node != "n2" {
		t.Fatalf("/status?pod=clusters-a/etcd-1: %d %+v", code, got)
	}
	latest := &atomic.Pointer[Report]{}
	base := serve(latest, "")
	if code, _ := get(base); code != http.StatusServiceUnavailable {
		t.Fatalf("before the first poll: %d, want 503", code)
	}
	r := &reporter{log: zap.NewNop(), metrics: metrics.New(), member: "m1", statusPath: t.TempDir() + "/status.json",
		where: &Where{Node: "n1", Manifest: "/m/etcd.yaml", DataDir: "/d", QuarantineDir: "/q"}, latest: latest}
	for _, commit := range []uint64{7, 9} {
		res := memberstate.Result{Verdict: memberstate.Verdict{State: memberstate.Down}}
		res.Observation.Local = observation.Local{Name: "m1", DataDirClass: "ok",
			DataDirRaft: &observation.RaftPosition{Term: 2, Commit: commit, LastIndex: 12, Applied: 6}}
		r.export(res, false)
		code, got := get(base)
		if code != http.StatusOK || got.Where == nil || got.Where.Manifest != "/m/etcd.yaml" ||
			got.Observation.Local.DataDirRaft == nil || got.Observation.Local.DataDirRaft.Commit != commit {
			t.Fatalf("poll %d: %d %+v", commit, code, got)
		}
	}
}

// From session 35's review: /status read a held data dir's WAL for any
// member whose etcd held it without serving, in a healthy cluster too (a
// crash-looping member), on any GET. The read is for a lost majority
// only: there no member serves, and nothing else says where its log is.
func TestStatusReadsTheWALOnlyWhenTheMajorityIsLost(t *testing.T) {
	held := Report{Where: &Where{DataDir: t.TempDir()}}
	held.Observation.Local = observation.Local{Name: "m1", DataDirClass: "in-use"}
	if needsLogPosition(held) {
		t.Fatal("a held data dir in a cluster with its quorum: the WAL is read")
	}
	held.MajorityLost = true
	if !needsLogPosition(held) {
		t.Fatal("a held data dir with the majority lost: the WAL is not read")
	}
	serving := held
	serving.Observation.Local.Serving = true
	if needsLogPosition(serving) {
		t.Fatal("a serving member: the WAL is read")
	}
}

// Helper-32's review: the layout of the data dir is read when /status
// serves, not once at the start (a disk mounted since), and a symlink is
// said: the restore's cp -a and mv would take the link, not the data.
func TestWhereSaysTheDataDirsLayoutAsItIsNow(t *testing.T) {
	dir := t.TempDir()
	real, link := filepath.Join(dir, "real"), filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if w := (Where{DataDir: real}).WithLayout(); !w.LayoutChecked || w.DataDirSymlink || w.DataDirMountPoint || w.LayoutError != "" {
		t.Fatalf("a plain dir: %+v", w)
	}
	if w := (Where{DataDir: link}).WithLayout(); !w.LayoutChecked || !w.DataDirSymlink {
		t.Fatalf("a symlink: %+v", w)
	}
	if w := (Where{DataDir: "/proc"}).WithLayout(); !w.DataDirMountPoint {
		t.Fatalf("a mount root: %+v", w)
	}
}

// While the majority is lost the status file is written again, though
// nothing changed: a pod member's start gate takes a person's
// --force-new-cluster request only on a fresh word from its agent
// (plan.AgentWordFreshFor). A healthy member's file is not rewritten.
func TestTheStatusFileIsRenewedWhileTheMajorityIsLost(t *testing.T) {
	for _, lost := range []bool{true, false} {
		dir := t.TempDir()
		r := &reporter{log: zap.NewNop(), metrics: metrics.New(), member: "m1", statusPath: filepath.Join(dir, StatusFile)}
		res := memberstate.Result{Verdict: memberstate.Verdict{State: memberstate.Healthy, MajorityLost: lost}}
		res.Observation.Local = observation.Local{Name: "m1", DataDirClass: "ok"}
		res.Observation.At = time.Now().Add(-time.Second)
		r.export(res, false)
		first, err := os.ReadFile(r.statusPath)
		if err != nil {
			t.Fatal(err)
		}
		r.fileWritten = r.fileWritten.Add(-majorityLostFileEvery) // as if that long ago
		res.Observation.At = time.Now()                           // the next poll's
		r.export(res, false)
		again, err := os.ReadFile(r.statusPath)
		if err != nil {
			t.Fatal(err)
		}
		if renewed := string(again) != string(first); renewed != lost {
			t.Errorf("majority lost %v: file renewed %v", lost, renewed)
		}
		if w := memberruntime.ReadAgentWord(dir); w.Err != "" || w.MajorityLost != lost || time.Since(w.At) > time.Minute {
			t.Errorf("majority lost %v: the gate reads %+v", lost, w)
		}
	}
}
