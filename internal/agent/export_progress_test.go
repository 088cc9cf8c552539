package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/progress"
	"github.com/etcd-agent/etcd-agent/metrics"
	"go.uber.org/zap"
)

// Issue 44: while a long step of a recovery runs, the status file (what
// `etcd-agent status` shows) says how far it is at every export, the
// Node's line at most every progressEvery; once it ends, both say so once.
func TestAStepInProgressReachesTheStatusFileAndTheNode(t *testing.T) {
	board := &progress.Board{}
	node := &nodeStatus{pending: make(chan string, 1)} // not started: the test reads what is published
	r := &reporter{log: zap.NewNop(), metrics: metrics.New(), member: "node2", statusPath: filepath.Join(t.TempDir(), StatusFile),
		progress: board, progressEvery: time.Hour, node: node}
	published := func() []string {
		var out []string
		for {
			select {
			case l := <-node.pending:
				out = append(out, l)
			default:
				return out
			}
		}
	}
	statusFile := func() Report {
		b, err := os.ReadFile(r.statusPath)
		if err != nil {
			t.Fatal(err)
		}
		var rep Report
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	res := memberstate.Result{Observation: observation.Observation{At: time.Now(), Local: observation.Local{DataDirClass: "missing"}},
		Verdict: memberstate.Verdict{State: memberstate.Lost, Reason: "data-dir-missing"}}
	r.export(res, true)
	published()
	r.fileWritten = time.Now().Add(-time.Hour)
	now := time.Now()
	board.Start("pre-change stream", progress.Bytes, 100<<20, now)
	board.Observe("pre-change stream", now, 50<<20)
	// The stream starts within a second of the line the state change
	// wrote: said a second later, not lost until progressEvery.
	r.export(res, true)
	if l := published(); len(l) != 0 {
		t.Fatalf("Node lines within a second of the last: %q", l)
	}
	r.published = time.Now().Add(-2 * time.Second)
	var lines []string
	for i := 0; i < 3; i++ {
		board.Observe("pre-change stream", time.Now(), int64(50-i)<<20)
		r.fileWritten = time.Now().Add(-time.Minute) // the file's 1 s bound passed
		r.export(res, true)
		if p := statusFile().Progress; len(p) != 1 || p[0].Left != int64(50-i)<<20 {
			t.Fatalf("export %d: status file progress %+v, want the stream at %d MiB left", i, p, 50-i)
		}
		lines = append(lines, published()...)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "; pre-change stream: 50 MiB of 100 MiB (50%)") {
		t.Fatalf("Node lines while the stream ran: %q; want one (every progressEvery) saying how far it is", lines)
	}
	// Progress alone rewrites the file at most once a second (each write
	// is fsynced).
	r.fileWritten = time.Now()
	board.Observe("pre-change stream", time.Now(), 10<<20)
	r.export(res, true)
	if p := statusFile().Progress; len(p) != 1 || p[0].Left != 48<<20 {
		t.Fatalf("status file progress %+v within a second of the last write; want it left as written (48 MiB left)", p)
	}
	board.Stop("pre-change stream")
	r.published = time.Now().Add(-time.Minute)
	r.export(res, true)
	if p := statusFile().Progress; len(p) != 0 {
		t.Fatalf("status file progress after the step ended: %+v", p)
	}
	if l := published(); len(l) != 1 || strings.Contains(l[0], "stream") {
		t.Fatalf("Node lines once the step ended: %q; want one without it", l)
	}
	r.export(res, true)
	if l := published(); len(l) != 0 {
		t.Fatalf("Node lines with nothing changed: %q", l)
	}
}
