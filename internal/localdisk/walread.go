package localdisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.uber.org/zap"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/etcdserver/api/snap"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
)

// walState is what a full read of the WAL tells us.
type walState struct {
	memberID, clusterID uint64
	// start is the snapshot the read started from (zero when none loaded).
	start walpb.Snapshot
	// lastIndex is the raft index of the last entry in the WAL, or the
	// snapshot's index when no entries follow it.
	lastIndex uint64
	// term is the term of the last hard state (at least the snapshot's).
	term uint64
	// commit is the last hard state's commit index (at least the
	// snapshot's): what etcd keeps of this log under --force-new-cluster,
	// which drops the entries after it (docs/design.md, majority lost).
	commit uint64
	// brokenSnaps are .snap files that failed to load and were skipped, as
	// etcd itself would skip them.
	brokenSnaps []string
}

// readWAL reads the WAL the way etcd does at startup (newest snapshot that
// the WAL confirms, then every record after it) but strictly read-only:
//   - wal.OpenForRead opens segments O_RDONLY and takes no locks; in that
//     mode ReadAll neither zeroes a torn tail nor repairs anything.
//   - snapshots are read with snap.Read; Snapshotter.LoadNewestAvailable
//     would rename unreadable .snap files to .broken and delete db.tmp files.
func readWAL(dataDir, walDir string) (walState, error) {
	lg := zap.NewNop()

	walSnaps, err := wal.ValidSnapshotEntries(lg, walDir)
	if err != nil {
		return walState{}, fmt.Errorf("scan snapshot records: %w", err)
	}
	st := walState{}
	st.start, st.brokenSnaps, err = newestUsableSnapshot(filepath.Join(dataDir, snapRelPath), walSnaps)
	if err != nil {
		return walState{}, err
	}

	w, err := wal.OpenForRead(lg, walDir, st.start)
	if err != nil {
		return walState{}, fmt.Errorf("open from snapshot index %d: %w", st.start.Index, err)
	}
	// In read mode Close only releases what ReadAll has not; ReadAll closes
	// the segment files itself on success. On failure they stay open until
	// garbage-collected: wal offers no way to close them.
	defer w.Close()
	metadata, hs, ents, err := w.ReadAll()
	if err != nil {
		return walState{}, fmt.Errorf("read records after snapshot index %d: %w", st.start.Index, err)
	}

	st.memberID, st.clusterID, err = decodeWALMetadata(metadata)
	if err != nil {
		return walState{}, err
	}
	st.lastIndex, st.term = st.start.Index, max(hs.Term, st.start.Term)
	st.commit = max(hs.Commit, st.start.Index)
	if len(ents) > 0 {
		st.lastIndex = ents[len(ents)-1].Index
	}
	return st, nil
}

// newestUsableSnapshot mirrors Snapshotter.LoadNewestAvailable without its
// side effects: the newest readable .snap file whose (term, index) the WAL
// also records. No match means reading starts at the WAL's beginning, which
// is exactly what etcd does.
func newestUsableSnapshot(snapDir string, walSnaps []walpb.Snapshot) (walpb.Snapshot, []string, error) {
	names, err := fileutil.ReadDir(snapDir, fileutil.WithExt(".snap"))
	if err != nil {
		return walpb.Snapshot{}, nil, fmt.Errorf("list %s: %w", snapDir, err)
	}
	// Names are <term>-<index> in fixed-width hex, so reverse lexical order
	// is newest first (same order etcd uses).
	sort.Sort(sort.Reverse(sort.StringSlice(names)))

	var broken []string
	for _, name := range names {
		s, err := snap.Read(zap.NewNop(), filepath.Join(snapDir, name))
		if err != nil {
			broken = append(broken, name)
			continue
		}
		for _, ws := range walSnaps {
			if ws.Index == s.Metadata.Index && ws.Term == s.Metadata.Term {
				return walpb.Snapshot{Index: ws.Index, Term: ws.Term}, broken, nil
			}
		}
	}
	return walpb.Snapshot{}, broken, nil
}

func decodeWALMetadata(b []byte) (memberID, clusterID uint64, err error) {
	if len(b) == 0 {
		return 0, 0, errors.New("no metadata record found")
	}
	var md etcdserverpb.Metadata
	if err := md.Unmarshal(b); err != nil {
		return 0, 0, fmt.Errorf("decode metadata record: %w", err)
	}
	return md.NodeID, md.ClusterID, nil
}

// ReadWALIdentity reads only the head of the newest segment, where every
// segment repeats the metadata record. Used while the member runs: it is
// cheap and tolerates the tail being written concurrently.
func ReadWALIdentity(walDir string) (memberID, clusterID uint64, err error) {
	names, err := fileutil.ReadDir(walDir, fileutil.WithExt(".wal"))
	if err != nil {
		return 0, 0, err
	}
	if len(names) == 0 {
		return 0, 0, wal.ErrFileNotFound
	}
	newest := filepath.Join(walDir, names[len(names)-1])
	f, err := os.Open(newest)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()

	dec := wal.NewDecoder(fileutil.NewFileReader(f))
	rec := &walpb.Record{}
	// A segment starts with a CRC record then the metadata record; allow a
	// little slack rather than hard-coding the position.
	for range 4 {
		if err := dec.Decode(rec); err != nil {
			return 0, 0, fmt.Errorf("decode head of %s: %w", filepath.Base(newest), err)
		}
		if rec.Type == wal.MetadataType {
			return decodeWALMetadata(rec.Data)
		}
	}
	return 0, 0, fmt.Errorf("no metadata record at head of %s", filepath.Base(newest))
}

func formatBrokenSnaps(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("; skipped unreadable snapshot files: %s", strings.Join(names, ", "))
}

// RaftPosition is where a WAL's log stands.
type RaftPosition struct {
	MemberID, Term, Commit, LastIndex uint64
}

// ReadRaftPositionIsolated is ReadRaftPosition in the inspection child:
// wal.ReadAll holds every entry since the last snapshot in memory, in the
// child's heap, not the agent's; a crash of the reader (a Go fatal error,
// a panic) ends the child, never the agent; ctx's end kills it. The child
// shares the container's memory limit: a WAL too big for it can still get
// the container OOM-killed (with memory.oom.group, the agent too), as the
// in-process read could; a streaming read is the next step (docs/design.md
// §7, "Majority lost, guided").
func ReadRaftPositionIsolated(ctx context.Context, d Dirs) (RaftPosition, error) {
	r, err := runInspection(ctx, inspectRequest{DataDir: d.Data, WALDir: d.WAL, RaftPositionOnly: true})
	switch {
	case err != nil:
		return RaftPosition{}, fmt.Errorf("read WAL %s: %w", d.WALDir(), err)
	case r.Class != ClassOK:
		return RaftPosition{}, errors.New(r.Detail) // (names the WAL dir already)
	}
	return RaftPosition{MemberID: r.MemberID, Term: r.WALTerm, Commit: r.WALCommit, LastIndex: r.WALIndex}, nil
}

// raftPositionOnly is the child's read for ReadRaftPositionIsolated: a
// Result of class ok with the WAL's IDs and position, or of no class with
// why not.
func raftPositionOnly(req inspectRequest, stage func(step string, partial Result)) Result {
	d := Dirs{Data: req.DataDir, WAL: req.WALDir}
	stage("read WAL "+d.WALDir(), Result{})
	p, err := ReadRaftPosition(d)
	if err != nil {
		return Result{Detail: err.Error()}
	}
	return Result{Class: ClassOK, MemberID: p.MemberID, WALTerm: p.Term, WALCommit: p.Commit, WALIndex: p.LastIndex}
}

// ReadRaftPosition reads the WAL of d read-only, taking no lock: usable
// while etcd holds the data dir. A member restarted without a quorum runs
// but never serves clients (it serves once it has published itself to the
// cluster), so its WAL is the only witness of its log. A tail etcd is
// writing reads as torn, which read mode tolerates.
func ReadRaftPosition(d Dirs) (p RaftPosition, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("read WAL %s: panic: %v", d.WALDir(), r)
		}
	}()
	ws, err := readWAL(d.Data, d.WALDir())
	if err != nil {
		return RaftPosition{}, fmt.Errorf("read WAL %s: %w", d.WALDir(), err)
	}
	return RaftPosition{MemberID: ws.memberID, Term: ws.term, Commit: ws.commit, LastIndex: ws.lastIndex}, nil
}
