package journal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The journal is read back at every start, after whatever happened to the
// agent, its version or its disk. Seeds are records the agent writes.

func seedRecords() []Record {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := Record{ID: "r1", Member: "m1", Node: "node2", Request: "auto", OldMemberID: 0xd8a03b6ed23776c0, NewMemberID: 0x1,
		PeerURLs: []string{"https://10.0.0.12:2380"}, StartedAt: now, RejoinMode: "seed", SeedIndex: 12, SeedTerm: 2,
		SnapshotPath: "/var/lib/etcd-agent/backup.db", SnapshotBytes: 20480, SnapshotSHA256: "ab", SnapshotClusterID: 0xcdf8, BackupSeeds: true}
	r.Advance(PhaseStarted, now)
	r.Advance(PhaseRemoved, now.Add(time.Second))
	done := Record{ID: "r0", Member: "m1", Kind: KindRollbackLearner, LearnerID: 0x42, Request: "move-away", MoveTarget: "node3",
		MoveClaimUID: "u1", ClaimReleasedAt: now, Result: ResultFailed, Reason: "LeaseLost", Failures: 2, LastFailureAt: now,
		FinishedAt: now, PutBack: "restarted"}
	done.Advance(PhaseDone, now)
	return []Record{r, done, {Member: "m1"}}
}

// FuzzLoad: a journal read back is the named member's; it saves and loads
// again as the same record. A refused file yields no record (the agent
// then says to move it aside), never half of one.
func FuzzLoad(f *testing.F) {
	for _, r := range seedRecords() {
		b, _ := json.MarshalIndent(r, "", "  ")
		f.Add(b)
	}
	for _, s := range []string{"{not json", `{"member":"m1","phase":"prepared","oldMemberID":"zz"}`,
		`{"member":"m1","phase":"no-such-phase","phaseTimes":{"started":"2026-01-02T03:04:05+01:00"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(Path(dir, "m1"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		r, ok, err := Load(dir, "m1")
		if err != nil || !ok {
			if ok || err == nil || !reflect.DeepEqual(r, Record{}) {
				t.Fatalf("Load(%q) = %+v, %v, %v", b, r, ok, err)
			}
			return
		}
		if r.Member != "m1" {
			t.Fatalf("Load(%q, m1) returned member %q's record", b, r.Member)
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("loaded %+v, cannot write it: %v", r, err)
		}
		// What Save writes (Save's fsyncs would slow the fuzzer tenfold).
		out := filepath.Join(dir, "again")
		saved, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(out, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(Path(out, r.Member), append(saved, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		r2, ok, err := Load(out, "m1")
		got, _ := json.Marshal(r2)
		if err != nil || !ok || string(got) != string(want) || r2.Active() != r.Active() {
			t.Fatalf("saved %s, loaded %s (%v, %v)", want, got, ok, err)
		}
	})
}
