package lab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.uber.org/zap"
)

// CrashMember SIGKILLs the node's etcd (a crash: nothing is flushed or
// closed) and keeps it down: its manifest is moved aside first, as
// StopMember does, so the supervisor does not restart it (the SIGKILL
// comes right after the move, long before the supervisor's SIGTERM could
// let etcd shut down cleanly). StartMember brings it back. It returns the
// PID it killed.
func (l *Lab) CrashMember(node string) (int, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return 0, err
	}
	pid, err := l.EtcdPID(node)
	if err != nil {
		return 0, err
	}
	l.log.Info("fault: crash member", zap.String("node", node), zap.Int("pid", pid))
	if err := os.Rename(n.EtcdManifest(), stoppedManifest(*n)); err != nil {
		return 0, err
	}
	_ = signalOurs(pid, l.Spec.Dir, syscall.SIGKILL) // gone already is fine: waitGone says so
	if !waitGone(pid, l.Spec.Dir, 10*time.Second) {
		return pid, fmt.Errorf("etcd %d on %s survived SIGKILL", pid, node)
	}
	return pid, l.waitEtcdGone(*n)
}

// WAL record types (go.etcd.io/etcd/server/v3/storage/wal).
var walRecordTypes = map[int64]string{1: "metadata", 2: "entry", 3: "state", 4: "crc", 5: "snapshot"}

// TornRecord is what TearWALTail tore.
type TornRecord struct {
	File string `json:"file"`
	// Offset is the record's frame (its length field) in File.
	Offset int64 `json:"offset"`
	// Bytes is the record's length plus padding: the bytes zeroed.
	Bytes int64 `json:"bytes"`
	// Type is the record's type (1 metadata, 2 entry, 3 state, 4 crc,
	// 5 snapshot), TypeName its name.
	Type     int64  `json:"type"`
	TypeName string `json:"typeName"`
}

// TearWALTail makes the last record of the node's newest WAL file a torn
// write, as a crash in the middle of writing it leaves: the record's data
// bytes (and padding) become zeros, its length field stays. etcd's WAL
// decoder reads a record that does not unmarshal, or fails its CRC, and
// whose data holds an all-zero sector chunk as a torn entry (isTornEntry:
// io.ErrUnexpectedEOF in the last file), and etcd repairs that on its next
// start by truncating the file before the record (wal.Repair, logged as
// "repairing" then "repaired").
//
// The member's etcd must not run: stop it with StopMember or CrashMember
// first, and StartMember after. Which record is last depends on how etcd
// stopped. StopMember: etcd closes its WAL, which writes out its buffered
// records, so the tail is the HardState that follows the last entries;
// tearing it loses nothing the member acknowledged and etcd repairs and
// rejoins. CrashMember (SIGKILL): a HardState that only moves the commit
// index is not fsynced and dies in etcd's write buffer, so the tail is
// usually the last entry, which the member had acknowledged; losing it
// is more than a real torn write loses, and raft then panics on the
// leader's next heartbeat ("tocommit(N) is out of range [lastIndex(N-1)]")
// and the member crash-loops until it is removed and added back. The
// returned TornRecord tells which it was. The WAL file's lock (etcd's
// own) is held while tearing, so a running etcd is refused.
func (l *Lab) TearWALTail(node string) (TornRecord, error) {
	var t TornRecord
	newest, err := l.newestWALOfStopped(node)
	if err != nil {
		return t, err
	}
	if t, err = tearLastRecord(newest); err != nil {
		return t, err
	}
	l.log.Info("fault: tear wal tail", zap.String("node", node), zap.String("file", t.File),
		zap.Int64("offset", t.Offset), zap.Int64("bytes", t.Bytes), zap.String("recordType", t.TypeName))
	return t, nil
}

// AppendTornRecord leaves on the node's newest WAL file what a crash in the
// middle of an append leaves: a record frame after the last record whose
// bytes never reached the disk (zeros). No record the member wrote is
// lost, so nothing it acknowledged is: the realistic torn write. etcd reads
// it as a torn entry and repairs the file on its next start. The member's
// etcd must not run (CrashMember first, StartMember after).
func (l *Lab) AppendTornRecord(node string) (TornRecord, error) {
	var t TornRecord
	newest, err := l.newestWALOfStopped(node)
	if err != nil {
		return t, err
	}
	if t, err = appendTornRecord(newest); err != nil {
		return t, err
	}
	l.log.Info("fault: torn record appended to the wal", zap.String("node", node), zap.String("file", t.File), zap.Int64("offset", t.Offset))
	return t, nil
}

// newestWALOfStopped is the newest WAL file of the node's member, whose etcd
// must not run.
func (l *Lab) newestWALOfStopped(node string) (string, error) {
	n, err := l.Spec.Node(node)
	if err != nil {
		return "", err
	}
	if pid, err := l.EtcdPID(node); err == nil {
		return "", fmt.Errorf("node %s: etcd is running (pid %d): stop it first (CrashMember or StopMember)", node, pid)
	}
	files, err := filepath.Glob(filepath.Join(n.DataDir, "member", "wal", "*.wal"))
	if err != nil || len(files) == 0 {
		return "", fmt.Errorf("node %s: no WAL files under %s", node, n.DataDir)
	}
	sort.Strings(files) // <seq>-<index>.wal, both fixed-width hex
	return files[len(files)-1], nil
}

// tornRecordBytes is the appended record's length: a few entries' worth,
// 8-aligned (no padding), all of it within one chunk etcd checks for zeros.
const tornRecordBytes = 64

// appendTornRecord writes a frame of tornRecordBytes zeros after the last
// record of the WAL file at path, under etcd's lock.
func appendTornRecord(path string) (TornRecord, error) {
	t := TornRecord{File: path, Bytes: tornRecordBytes, TypeName: "torn append"}
	f, err := fileutil.TryLockFile(path, os.O_RDWR, 0)
	if err != nil {
		return t, fmt.Errorf("lock %s (does an etcd hold it?): %w", path, err)
	}
	defer f.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	off, size, err := lastWALRecord(b)
	if err != nil {
		return t, fmt.Errorf("%s: %w", path, err)
	}
	t.Offset = off + 8 + size
	frame := make([]byte, 8+tornRecordBytes)
	binary.LittleEndian.PutUint64(frame, tornRecordBytes)
	if _, err := f.WriteAt(frame, t.Offset); err != nil {
		return t, err
	}
	return t, f.Sync()
}

// tearLastRecord zeroes the data and padding of the last record of the
// WAL file at path, under etcd's lock.
func tearLastRecord(path string) (TornRecord, error) {
	t := TornRecord{File: path}
	// etcd's own lock on its WAL files (an OFD lock where there is one).
	f, err := fileutil.TryLockFile(t.File, os.O_RDWR, 0)
	if err != nil {
		return t, fmt.Errorf("lock %s (does an etcd hold it?): %w", t.File, err)
	}
	defer f.Close()
	b, err := os.ReadFile(t.File)
	if err != nil {
		return t, err
	}
	t.Offset, t.Bytes, err = lastWALRecord(b)
	if err != nil {
		return t, fmt.Errorf("%s: %w", t.File, err)
	}
	data := b[t.Offset+8 : t.Offset+8+t.Bytes]
	var rec walpb.Record
	recBytes, _ := walFrameSize(int64(binary.LittleEndian.Uint64(b[t.Offset:])))
	if err := rec.Unmarshal(data[:recBytes]); err != nil {
		return t, fmt.Errorf("%s: last record at %d does not unmarshal: %w", t.File, t.Offset, err)
	}
	t.Type, t.TypeName = rec.Type, walRecordTypes[rec.Type]
	if _, err := f.WriteAt(make([]byte, t.Bytes), t.Offset+8); err != nil {
		return t, err
	}
	return t, f.Sync()
}

// walFrameSize splits a WAL length field: the low 56 bits are the record's
// length; when the top bit is set, the low 3 bits of the top byte are the
// padding after it (encoder.go encodeFrameSize).
func walFrameSize(lenField int64) (recBytes, padBytes int64) {
	recBytes = int64(uint64(lenField) & ^(uint64(0xff) << 56))
	if lenField < 0 {
		padBytes = int64((uint64(lenField) >> 56) & 0x7)
	}
	return recBytes, padBytes
}

// lastWALRecord walks the frames of a WAL file up to its end or its
// preallocated zeros and returns the last record's offset and its length
// with padding.
func lastWALRecord(b []byte) (off, size int64, err error) {
	off = -1
	for pos := int64(0); pos+8 <= int64(len(b)); {
		lf := int64(binary.LittleEndian.Uint64(b[pos:]))
		if lf == 0 {
			break // preallocated space
		}
		rec, pad := walFrameSize(lf)
		if pos+8+rec+pad > int64(len(b)) {
			return 0, 0, fmt.Errorf("record at %d (%d bytes) runs past the end of the file: torn already", pos, rec+pad)
		}
		off, size = pos, rec+pad
		pos += 8 + rec + pad
	}
	if off < 0 {
		return 0, 0, errors.New("no WAL record")
	}
	return off, size, nil
}
