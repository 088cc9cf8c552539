package pin

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/record"
)

// Pins are read from the agent's state dir (Load, LoadAdmission) and from
// a Node's etcd-agent.io/pins annotation (DecodeMap), which outlives the
// node and which anyone allowed to patch Nodes can edit. Seeds are what
// Save and EncodeWith write, and this package's test inputs.

var seedPins = func() []Pin {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return []Pin{
		{Member: "node1", ClusterID: 0xc1, MemberID: 0xabc, PeerURLs: []string{"http://p"}, FirstSeenAt: time.Unix(5, 0).UTC(), SeenAt: time.Unix(6, 0).UTC()},
		{Member: "etcd-0", ClusterID: 0xcdf818194e3a8c32, MemberID: 0xd8a03b6ed23776c0, ClaimName: "data-etcd-0", ClaimUID: "u1",
			FirstSeenAt: at, SeenAt: at, HighWater: record.Progress{Term: 2, Index: 900, At: at}, Reached: record.Progress{Term: 2, Index: 1000, At: at}},
	}
}()

// canonical is p as the agent writes it.
func canonical(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted %+v but cannot write it: %v", v, err)
	}
	return string(b)
}

// FuzzDecodeMap: an accepted pins annotation holds only pins seen serving,
// each under its own member's name; EncodeWith of any of them writes a map
// that reads back as the same pins, and never lowers a member's
// high-water mark. A refused one yields no map.
func FuzzDecodeMap(f *testing.F) {
	pins := map[string]Pin{}
	for _, p := range seedPins {
		s, _ := EncodeWith(pins, p)
		f.Add(s)
	}
	for _, s := range []string{"", "{}", "{not json", `{"node1":{"member":"node1"}}`, `{"node1":{"member":"node9","clusterID":"c1","memberID":"abc"}}`,
		`{"node1":{"member":"node1","clusterID":"c1","memberID":"abc"},"node1":{"member":"node1","clusterID":"c2","memberID":"abc"}}`, `[]`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pins, err := DecodeMap(s)
		if err != nil {
			if pins != nil {
				t.Fatalf("refused %q but returned %v", s, pins)
			}
			return
		}
		for member, p := range pins {
			if p.Member != member || !p.Seen() {
				t.Fatalf("accepted %q: pin %+v under %q", s, p, member)
			}
		}
		want := canonical(t, pins)
		for member, p := range pins {
			enc, err := EncodeWith(maps.Clone(pins), p)
			if err != nil || enc != want {
				t.Fatalf("EncodeWith(%s) of %q's own pin: %s (%v)", want, member, enc, err)
			}
			lowered := p
			lowered.HighWater = record.Progress{}
			enc, err = EncodeWith(maps.Clone(pins), lowered)
			if err != nil {
				t.Fatal(err)
			}
			again, err := DecodeMap(enc)
			if err != nil {
				t.Fatalf("EncodeWith wrote %s, DecodeMap refuses it: %v", enc, err)
			}
			if hw := again[member].HighWater; hw.Term != p.HighWater.Term || hw.Index != p.HighWater.Index {
				t.Fatalf("EncodeWith lowered %q's high-water mark from %+v to %+v", member, p.HighWater, hw)
			}
		}
		again, err := DecodeMap(want)
		if err != nil || canonical(t, again) != want {
			t.Fatalf("round trip of %q: %s read as %v (%v)", s, want, again, err)
		}
	})
}

// FuzzLoad: a pin file read back is the named member's, seen serving; it
// saves and loads again as the same pin. A refused file yields nothing.
func FuzzLoad(f *testing.F) {
	for _, p := range seedPins {
		p.Member = "m1"
		b, _ := json.MarshalIndent(p, "", "  ")
		f.Add(b)
	}
	for _, s := range []string{"{not json", `{"member":"m1"}`, `{"member":"node9","clusterID":"c1","memberID":"abc"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(Path(dir, "m1"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		p, ok, err := Load(dir, "m1")
		if err != nil || !ok {
			if ok || err == nil || !reflect.DeepEqual(p, Pin{}) {
				t.Fatalf("Load(%q) = %+v, %v, %v", b, p, ok, err)
			}
			return
		}
		if p.Member != "m1" || !p.Seen() {
			t.Fatalf("Load(%q) = %+v", b, p)
		}
		out := filepath.Join(dir, "again")
		if err := Save(out, p); err != nil {
			t.Fatalf("loaded %+v, cannot save it: %v", p, err)
		}
		p2, ok, err := Load(out, "m1")
		if err != nil || !ok || canonical(t, p2) != canonical(t, p) {
			t.Fatalf("saved %+v, loaded %+v (%v, %v)", p, p2, ok, err)
		}
	})
}

// FuzzLoadAdmission: an admission read back has been given (its time);
// it saves and loads again as the same. A refused file yields the zero
// Admission.
func FuzzLoadAdmission(f *testing.F) {
	for _, a := range []record.Admission{
		{ClusterSeen: true, ClusterID: 0xcdf818194e3a8c32, Record: "etcd/etcd", CheckedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{Record: "etcd/etcd", CheckedAt: time.Unix(1, 0).UTC()},
	} {
		b, _ := json.MarshalIndent(a, "", "  ")
		f.Add(b)
	}
	f.Add([]byte(`{"clusterSeen":true,"record":"x"}`))
	f.Add([]byte(`{"clusterSeen":true,"clusterID":"zz","checkedAt":"2026-01-02T03:04:05Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, AdmissionFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := LoadAdmission(dir)
		if err != nil {
			if a != (record.Admission{}) {
				t.Fatalf("refused %q but returned %+v", b, a)
			}
			return
		}
		if !a.Given() {
			t.Fatalf("LoadAdmission(%q) = %+v: not given", b, a)
		}
		out := filepath.Join(dir, "again")
		if err := SaveAdmission(out, a); err != nil {
			t.Fatalf("loaded %+v, cannot save it: %v", a, err)
		}
		a2, err := LoadAdmission(out)
		if err != nil || canonical(t, a2) != canonical(t, a) {
			t.Fatalf("saved %+v, loaded %+v (%v)", a, a2, err)
		}
	})
}
