package watchdog

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/etcd-agent/etcd-agent/internal/observation"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func testWatchdog(t *testing.T, file string, log *zap.Logger) *Watchdog {
	t.Helper()
	w, err := New(Config{Identity: Identity{Name: "b", PeerURLs: []string{"http://10.0.0.2:2380"}, ClientURL: "http://10.0.0.2:2379",
		DataDir: t.TempDir()}, Endpoints: []string{"http://10.0.0.1:2379", "http://10.0.0.9:2379"}, EndpointsFile: file, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// Learned endpoints follow the member list: a removed member's URL (a
// stale IP that may be recycled for another cluster) is dropped; the
// configured endpoints and our own client URL always stay.
func TestLearnedEndpointsArePrunedToTheMemberList(t *testing.T) {
	file := filepath.Join(t.TempDir(), "endpoints.json")
	stale, _ := json.Marshal([]string{"http://10.0.0.7:2379"})
	if err := os.WriteFile(file, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	w := testWatchdog(t, file, nil)
	if !slices.Contains(w.endpoints, "http://10.0.0.7:2379") {
		t.Fatalf("endpoints %v: the persisted ones are not loaded", w.endpoints)
	}
	members := []observation.Member{{ID: 1, ClientURLs: []string{"http://10.0.0.1:2379"}},
		{ID: 2, ClientURLs: []string{"http://10.0.0.2:2379"}}, {ID: 3, ClientURLs: []string{"http://10.0.0.3:2379", "http://10.0.0.33:2379"}}}
	w.learnEndpoints(members, 7)
	members = members[:2] // member 3 removed
	w.learnEndpoints(members, 7)
	want := []string{"http://10.0.0.2:2379", "http://10.0.0.1:2379", "http://10.0.0.9:2379"}
	if !slices.Equal(w.endpoints, want) {
		t.Fatalf("endpoints %v, want %v", w.endpoints, want)
	}
	var saved []string
	b, _ := os.ReadFile(file)
	if err := json.Unmarshal(b, &saved); err != nil || !slices.Equal(saved, want) {
		t.Fatalf("persisted %s (%v), want %v", b, err, want)
	}
}

// A corrupt endpoints file is an error that is logged, not an empty list.
func TestCorruptEndpointsFileIsLogged(t *testing.T) {
	file := filepath.Join(t.TempDir(), "endpoints.json")
	if err := os.WriteFile(file, []byte(`["http://10.0.0.7:23`), 0o644); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	testWatchdog(t, file, zap.New(core))
	if logs.FilterMessageSnippet("endpoints").Len() == 0 {
		t.Fatalf("a corrupt %s was read silently; logged: %v", file, logs.All())
	}
}

// A corrupt endpoints file is not overwritten silently by the next learned
// list: it is kept aside (endpoints.json.corrupt-<time>) for a person to
// look at, and its error stays visible (LoadError, for the metric).
func TestCorruptEndpointsFileIsKeptAsideNotOverwritten(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "endpoints.json")
	corrupt := []byte(`["http://10.0.0.7:23`)
	if err := os.WriteFile(file, corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	w := testWatchdog(t, file, nil)
	if w.LoadError() == nil {
		t.Fatal("LoadError is nil for a corrupt file")
	}
	w.learnEndpoints([]observation.Member{{ID: 3, ClientURLs: []string{"http://10.0.0.3:2379"}}}, 7)
	aside, _ := filepath.Glob(file + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("corrupt file kept aside as %v, want one %s.corrupt-<time>", aside, file)
	}
	if b, err := os.ReadFile(aside[0]); err != nil || string(b) != string(corrupt) {
		t.Fatalf("kept aside %q (%v), want the corrupt content %q", b, err, corrupt)
	}
	var saved []string
	if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &saved) != nil || len(saved) == 0 {
		t.Fatalf("learned endpoints not saved after keeping the corrupt file aside: %q %v", b, err)
	}
	// Only once: the next change overwrites the (now good) file.
	w.learnEndpoints([]observation.Member{{ID: 1, ClientURLs: []string{"http://10.0.0.5:2379"}}}, 7)
	if aside, _ := filepath.Glob(file + ".corrupt-*"); len(aside) != 1 {
		t.Fatalf("kept aside again: %v", aside)
	}
}
