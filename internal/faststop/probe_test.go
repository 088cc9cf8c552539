package faststop

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// closedURL is a loopback URL nobody listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	l.Close()
	return u
}

// Once etcd's connection is drained, the watch counts how long every
// listen URL has refused with the request counts unchanged: a count that
// moves (a request started or answered), a listener still open, or a db
// on disk starts the quiet over.
func TestQuietIsCountedFromTheLastChangeOfTheRequestCounts(t *testing.T) {
	var started, handled atomic.Int64
	started.Store(10)
	handled.Store(10)
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE etcd_server_is_leader gauge\netcd_server_is_leader 0\n"+
			"# TYPE grpc_server_started_total counter\ngrpc_server_started_total{grpc_type=\"unary\"} %d\n"+
			"# TYPE grpc_server_handled_total counter\ngrpc_server_handled_total{grpc_type=\"unary\"} %d\n", started.Load(), handled.Load())
	}))
	defer metrics.Close()
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	dataDir := t.TempDir()
	now := time.Unix(1000, 0)
	p := &prober{c: Config{ListenURLs: []string{closedURL(t), closedURL(t)}, MetricsURL: metrics.URL, DataDir: dataDir},
		hc: metrics.Client(), clockForNow: func() time.Time { return now }}
	look := func() plan.FastStopFacts {
		f := plan.FastStopFacts{Served: true, Drained: true}
		p.quietFor(&f, context.Background())
		return f
	}
	if f := look(); !f.ClientRefused || f.QuietFor != 0 || f.MetricsError != "" {
		t.Fatalf("first look: %+v, want refused and quiet from now", f)
	}
	now = now.Add(300 * time.Millisecond)
	if f := look(); f.QuietFor != 300*time.Millisecond {
		t.Fatalf("unchanged counts: quiet %s, want 300ms", f.QuietFor)
	}
	handled.Add(1) // an answer went out (started had counted it already)
	started.Add(1)
	now = now.Add(300 * time.Millisecond)
	if f := look(); f.QuietFor != 0 {
		t.Fatalf("counts moved: quiet %s, want 0", f.QuietFor)
	}
	now = now.Add(plan.FastStopQuiet)
	if f := look(); f.QuietFor != plan.FastStopQuiet {
		t.Fatalf("quiet %s, want %s", f.QuietFor, plan.FastStopQuiet)
	}
	// One listener still open: not shutting down, and the quiet restarts.
	p.c.ListenURLs = append(p.c.ListenURLs, "http://"+open.Addr().String())
	if f := look(); f.ClientRefused || f.QuietFor != 0 {
		t.Fatalf("a listener still open: %+v, want not refused", f)
	}
	p.c.ListenURLs = p.c.ListenURLs[:2]
	if err := os.MkdirAll(filepath.Join(dataDir, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "member", "snap", "db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if f := look(); !f.DBOnDisk || f.QuietFor != 0 {
		t.Fatalf("a db on disk: %+v, want DBOnDisk", f)
	}
}
