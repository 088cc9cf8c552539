package gate

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberruntime"
	"github.com/etcd-agent/etcd-agent/internal/plan"
)

// TestTheWaitForTheArmKeepsItsStartAcrossLooks: the gate reads the
// request again at every look; one written with a non-UTC offset (a
// person's `date -Iseconds` in India; Go shares one Location per whole-hour
// offset, not per +05:30) must not restart the minute's wait each time.
func TestTheWaitForTheArmKeepsItsStartAcrossLooks(t *testing.T) {
	dir := t.TempDir()
	req := `{"memberID":"7","requestedAt":"2026-12-07T23:10:00+05:30"}`
	if err := os.WriteFile(filepath.Join(dir, memberruntime.ForceFile), []byte(req), 0o600); err != nil {
		t.Fatal(err)
	}
	read := func() plan.ForceNewClusterRequest {
		r, ok, err := memberruntime.ReadForceRequest(dir)
		if !ok || err != nil {
			t.Fatalf("the request reads back: %v, %v", ok, err)
		}
		return r
	}
	started := time.Unix(2_000_000, 0)
	w := armWait{req: read(), since: started}
	if got := w.sinceFor(read()); !got.Equal(started) {
		t.Fatalf("the same request read again waits since %v, want %v (the wait restarted)", got, started)
	}
	other := read()
	other.RequestedAt = other.RequestedAt.Add(time.Second)
	if got := w.sinceFor(other); !got.IsZero() {
		t.Fatalf("a newer request waits since %v, want a wait of its own", got)
	}
}
