package memberruntime

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The start gate reads HoldFile and StartFile from the member's state dir
// (the agent wrote them; a person, an older agent or a full disk may have
// left anything there). Seeds are what the pod runtime writes.

// FuzzReadHold: a hold file that exists holds etcd, whatever it holds
// (never start on doubt); a readable one writes back as the same hold.
func FuzzReadHold(f *testing.F) {
	b, _ := json.Marshal(Hold{Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Reason: "rejoin r1: stopping the member"})
	f.Add(b)
	f.Add([]byte(`{}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"since":"yesterday"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, HoldFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		h, held, err := ReadHold(dir)
		if !held {
			t.Fatalf("hold file %q read as not held (%v)", b, err)
		}
		if err != nil {
			return
		}
		out, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("read %q, cannot write it: %v", b, err)
		}
		if err := os.WriteFile(filepath.Join(dir, HoldFile), out, 0o600); err != nil {
			t.Fatal(err)
		}
		h2, held, err := ReadHold(dir)
		if again, _ := json.Marshal(h2); !held || err != nil || string(again) != string(out) {
			t.Fatalf("round trip of %q: %s read as %s (%v, %v)", b, out, again, held, err)
		}
	})
}

// FuzzReadStartFlags: start flags accepted name the cluster and say
// "existing" (a rejoin never bootstraps); refused ones yield nothing; an
// accepted one writes back as the same.
func FuzzReadStartFlags(f *testing.F) {
	b, _ := json.Marshal(StartFlags{InitialCluster: "etcd-0=https://etcd-0.etcd:2380,etcd-1=https://etcd-1.etcd:2380",
		InitialClusterState: "existing", WrittenAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)})
	f.Add(b)
	f.Add([]byte(`{"initialCluster":"a=http://a:2380","initialClusterState":"new"}`))
	f.Add([]byte(`{"initialCluster":"","initialClusterState":"existing"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, StartFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, ok, err := ReadStartFlags(dir)
		if err != nil || !ok {
			if ok || err == nil || s != (StartFlags{}) {
				t.Fatalf("ReadStartFlags(%q) = %+v, %v, %v", b, s, ok, err)
			}
			return
		}
		if s.InitialCluster == "" || s.InitialClusterState != "existing" {
			t.Fatalf("accepted start flags %q: %+v", b, s)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("read %q, cannot write it: %v", b, err)
		}
		if err := os.WriteFile(filepath.Join(dir, StartFile), out, 0o600); err != nil {
			t.Fatal(err)
		}
		s2, ok, err := ReadStartFlags(dir)
		if again, _ := json.Marshal(s2); !ok || err != nil || string(again) != string(out) {
			t.Fatalf("round trip of %q: %s read as %s (%v, %v)", b, out, again, ok, err)
		}
	})
}
