package record

import (
	"encoding/json"
	"testing"
	"time"
)

// The records are the agent's own, but read back from disk and from the
// API (a Node's pins, a cluster's record), where a person, an older agent
// or a damaged disk may have left anything. Seeds are the shapes the agent
// writes and those its tests read.

// FuzzMemberID: a member ID reads from a hex string ("" is 0), writes
// back as the same ID, and a value it refuses leaves the ID as it was.
func FuzzMemberID(f *testing.F) {
	for _, s := range []string{`"d8a03b6ed23776c0"`, `""`, `"0"`, `"D8A03B6ED23776C0"`, `"ffffffffffffffff"`,
		`12`, `null`, `"1"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		const before = MemberID(0x5eed)
		id := before
		if err := id.UnmarshalJSON(b); err != nil {
			if id != before {
				t.Fatalf("UnmarshalJSON(%q) failed (%v) but set the ID to %x", b, err, uint64(id))
			}
			return
		}
		out, err := id.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var again MemberID
		if err := again.UnmarshalJSON(out); err != nil || again != id {
			t.Fatalf("%q read as %x, written as %s, read again as %x (%v)", b, uint64(id), out, uint64(again), err)
		}
	})
}

// FuzzDecodePin: an accepted pin has been seen (cluster and member IDs),
// and re-encoded it decodes to the same pin; a refused one is the zero Pin.
func FuzzDecodePin(f *testing.F) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, p := range []Pin{
		{Member: "node2", ClusterID: 0xcdf818194e3a8c32, MemberID: 0xd8a03b6ed23776c0, PeerURLs: []string{"https://10.0.0.12:2380"},
			FirstSeenAt: at, SeenAt: at.Add(time.Hour)},
		{Member: "etcd-0", ClusterID: 1, MemberID: 2, ClaimName: "data-etcd-0", ClaimUID: "u-1",
			HighWater: Progress{Term: 3, Index: 1000, At: at}, Reached: Progress{Term: 3, Index: 1200, At: at.Add(time.Second)}},
	} {
		b, _ := json.Marshal(p)
		f.Add(b)
	}
	f.Add([]byte(`{"member":"m","clusterID":"1","memberID":""}`))
	f.Add([]byte(`{"member":"m","clusterID":"1","memberID":"zz"}`))
	f.Add([]byte(`{"member":"m","clusterID":"1","memberID":"2","seenAt":"2026-01-02T03:04:05+01:00","highWater":{"term":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePin(b)
		if err != nil {
			if p.Member != "" || p.Seen() || p.PeerURLs != nil {
				t.Fatalf("refused %q but returned %+v", b, p)
			}
			return
		}
		if !p.Seen() || !p.SameMember(p) {
			t.Fatalf("accepted a pin never seen: %+v", p)
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("accepted %q, cannot write it again: %v", b, err)
		}
		p2, err := DecodePin(out)
		if err != nil || !p2.SameMember(p) || p2.Member != p.Member {
			t.Fatalf("round trip of %q: %s read as %+v (%v)", b, out, p2, err)
		}
		if out2, _ := json.Marshal(p2); string(out2) != string(out) {
			t.Fatalf("round trip of %q: %s then %s", b, out, out2)
		}
	})
}
