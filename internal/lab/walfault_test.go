package lab

import (
	"errors"
	"io"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// tearLastRecord against etcd's own WAL code: the torn tail reads as
// io.ErrUnexpectedEOF, wal.Repair truncates it, and only that record is
// lost. Entries of odd sizes make the frames padded.
func TestTearLastRecordIsATornWriteToEtcd(t *testing.T) {
	lg := zaptest.NewLogger(t)
	for _, tc := range []struct {
		name     string
		lastHS   raftpb.HardState // empty: the last Save writes no HardState
		wantType string
		wantEnts int
		wantHS   raftpb.HardState
	}{
		{"state tail", raftpb.HardState{Term: 1, Commit: 3}, "state", 3, raftpb.HardState{Term: 1, Commit: 2}},
		{"entry tail", raftpb.HardState{}, "entry", 2, raftpb.HardState{Term: 1, Commit: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "wal")
			w, err := wal.Create(lg, dir, []byte("meta"))
			if err != nil {
				t.Fatal(err)
			}
			ent := func(i uint64, n int) raftpb.Entry {
				return raftpb.Entry{Term: 1, Index: i, Data: make([]byte, n)}
			}
			if err := w.Save(raftpb.HardState{Term: 1, Commit: 1}, []raftpb.Entry{ent(1, 5), ent(2, 13)}); err != nil {
				t.Fatal(err)
			}
			if err := w.Save(raftpb.HardState{Term: 1, Commit: 2}, nil); err != nil {
				t.Fatal(err)
			}
			if err := w.Save(tc.lastHS, []raftpb.Entry{ent(3, 7)}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
			if len(files) != 1 {
				t.Fatalf("WAL files %v", files)
			}
			torn, err := tearLastRecord(files[0])
			if err != nil {
				t.Fatal(err)
			}
			if torn.TypeName != tc.wantType {
				t.Fatalf("tore %+v, want a %s record", torn, tc.wantType)
			}
			readAll := func() ([]raftpb.Entry, raftpb.HardState, error) { return readWAL(t, lg, dir) }
			if _, _, err := readAll(); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("ReadAll of the torn WAL: %v, want io.ErrUnexpectedEOF", err)
			}
			if !wal.Repair(lg, dir) {
				t.Fatal("wal.Repair failed")
			}
			ents, hs, err := readAll()
			if err != nil {
				t.Fatalf("ReadAll after repair: %v", err)
			}
			if len(ents) != tc.wantEnts || hs.Commit != tc.wantHS.Commit || hs.Term != tc.wantHS.Term {
				t.Fatalf("after repair: %d entries, %v; want %d entries, %v", len(ents), hs, tc.wantEnts, tc.wantHS)
			}
		})
	}
}

// appendTornRecord against etcd's own WAL code: the appended frame reads
// as a torn entry, and after wal.Repair every record written before it is
// still there (a crash mid-append loses nothing acknowledged).
func TestAppendedTornRecordLosesNothingWritten(t *testing.T) {
	lg := zaptest.NewLogger(t)
	dir := filepath.Join(t.TempDir(), "wal")
	w, err := wal.Create(lg, dir, []byte("meta"))
	if err != nil {
		t.Fatal(err)
	}
	ents := []raftpb.Entry{{Term: 1, Index: 1, Data: make([]byte, 5)}, {Term: 1, Index: 2, Data: make([]byte, 13)}}
	if err := w.Save(raftpb.HardState{Term: 1, Commit: 2}, ents); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(files) != 1 {
		t.Fatalf("WAL files %v", files)
	}
	if _, err := appendTornRecord(files[0]); err != nil {
		t.Fatal(err)
	}
	readAll := func() ([]raftpb.Entry, raftpb.HardState, error) { return readWAL(t, lg, dir) }
	if _, _, err := readAll(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("ReadAll with a torn record appended: %v, want io.ErrUnexpectedEOF", err)
	}
	if !wal.Repair(lg, dir) {
		t.Fatal("wal.Repair failed")
	}
	got, hs, err := readAll()
	if err != nil {
		t.Fatalf("ReadAll after repair: %v", err)
	}
	if len(got) != 2 || hs.Commit != 2 {
		t.Fatalf("after repair: %d entries, %v; want both entries and commit 2", len(got), hs)
	}
}

// readWAL reads a whole WAL dir with etcd's own code.
func readWAL(t *testing.T, lg *zap.Logger, dir string) ([]raftpb.Entry, raftpb.HardState, error) {
	t.Helper()
	w, err := wal.Open(lg, dir, walpb.Snapshot{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, hs, ents, err := w.ReadAll()
	return ents, hs, err
}
