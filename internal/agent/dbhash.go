package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	"github.com/etcd-agent/etcd-agent/internal/timefmt"
	"go.uber.org/zap"
)

// hashWaitInStatus is how long /status waits for a hash it started: a
// small db's comes with the first answer, a big one's with a later one.
// Within StatusAnswersWithin: a status --cluster that gave up on the
// answer would lose the rest of the member's evidence.
const hashWaitInStatus = 3 * time.Second

// StatusAnswersWithin bounds /status's answer (its WAL read, or its wait
// for a hash): a reader waits longer than this.
const StatusAnswersWithin = max(walReadTimeout, hashWaitInStatus)

// hashErrorKeptFor is how long a failed hash's reason is given before the
// db is hashed again (a disk freed, a crash loop's etcd gone).
const hashErrorKeptFor = 30 * time.Second

// hashScratchDir, under the state dir, holds the copy being hashed.
const hashScratchDir = "hashkv-scratch"

// hashTimeout bounds one hash (a copy and a read of the whole db).
const hashTimeout = 10 * time.Minute

// dbHasher hashes, for /status, the db of a stopped member when the
// majority is lost (its etcd cannot answer HashKV): one at a time, in the
// inspection child, on a copy under scratch (localdisk.HashDBIsolated),
// in the background, kept while the db's file is unchanged.
type dbHasher struct {
	scratch string
	log     *zap.Logger
	mu      sync.Mutex
	done    map[string]dbHash // by db path
	running *dbHashJob
}

type dbHash struct {
	size int64
	mod  time.Time
	hash localdisk.KVHash
	err  string
	at   time.Time // when it ended
}

// of: r is the hash of the db as st says it is now.
func (r dbHash) of(st os.FileInfo, now time.Time) bool {
	return r.size == st.Size() && r.mod.Equal(st.ModTime()) && (r.err == "" || now.Sub(r.at) < hashErrorKeptFor)
}

type dbHashJob struct {
	dbPath string
	since  time.Time
	done   chan struct{}
}

// newDBHasher is the agent's hasher (copies earlier hashes left are
// removed by the next hash, under its lock: localdisk.HashDBIsolated).
func newDBHasher(scratch string, log *zap.Logger) *dbHasher {
	return &dbHasher{scratch: scratch, log: log, done: map[string]dbHash{}}
}

// cliHashTimeout bounds status --cluster's own hash of this node's member.
const cliHashTimeout = 5 * time.Minute

// cliHashes keeps AddDataDirHash's hashes for the process (status
// --cluster --watch asks again at every interval).
var cliHashes = struct {
	sync.Mutex
	done map[string]dbHash
}{done: map[string]dbHash{}}

// AddDataDirHash is /status's hash for a process that reads this node's
// member itself (status --cluster): the hash, or why none, in rep, waited
// for within ctx and cliHashTimeout (note says it starts), kept for the
// process while the db is unchanged.
func AddDataDirHash(ctx context.Context, rep *Report, stateDir string, note func(string)) {
	if !needsDataDirHash(*rep) {
		return
	}
	d := localdisk.Dirs{Data: rep.Where.DataDir, WAL: rep.Where.WALDir}
	st, err := os.Stat(d.DBPath())
	if err != nil {
		rep.DataDirHashNote = err.Error()
		return
	}
	cliHashes.Lock()
	defer cliHashes.Unlock()
	r, ok := cliHashes.done[d.DBPath()]
	if !ok || !r.of(st, time.Now()) {
		note(fmt.Sprintf("hashing %s (a copy, at most %s), to say what the restore keeps", d.DBPath(), cliHashTimeout))
		ctx, cancel := context.WithTimeout(ctx, cliHashTimeout)
		defer cancel()
		kv, err := localdisk.HashDBIsolated(ctx, d, filepath.Join(stateDir, hashScratchDir))
		r = dbHash{size: st.Size(), mod: st.ModTime(), hash: kv, at: time.Now()}
		if err != nil {
			r.err = err.Error()
		}
		cliHashes.done[d.DBPath()] = r
	}
	sayHash(rep, r)
}

// needsDataDirHash: the majority is lost and the member's etcd neither
// holds its data dir nor serves (stopped: by a person, a crash loop, the
// start gate), and the data dir checked ok.
func needsDataDirHash(rep Report) bool {
	l := rep.Observation.Local
	return rep.MajorityLost && l.DataDirClass == string(localdisk.ClassOK) && !l.Serving && rep.Where != nil
}

// add sets rep's hash, or says why there is none yet, waiting up to wait
// for a hash it starts or finds running on the same db.
func (h *dbHasher) add(ctx context.Context, rep *Report, wait time.Duration) {
	if !needsDataDirHash(*rep) {
		return
	}
	d := localdisk.Dirs{Data: rep.Where.DataDir, WAL: rep.Where.WALDir}
	dbPath := d.DBPath()
	st, err := os.Stat(dbPath)
	if err != nil {
		rep.DataDirHashNote = err.Error()
		return
	}
	h.mu.Lock()
	if r, ok := h.done[dbPath]; ok && r.of(st, time.Now()) {
		h.mu.Unlock()
		sayHash(rep, r)
		return
	}
	job := h.running
	switch {
	case job == nil:
		job = &dbHashJob{dbPath: dbPath, since: time.Now(), done: make(chan struct{})}
		h.running = job
		go h.hash(job, d, st)
	case job.dbPath != dbPath:
		h.mu.Unlock()
		rep.DataDirHashNote = fmt.Sprintf("waits: another member's db is being hashed (since %s)", timefmt.At(job.since, time.Now()))
		return
	}
	h.mu.Unlock()
	select {
	case <-job.done:
		h.mu.Lock()
		r := h.done[dbPath]
		h.mu.Unlock()
		sayHash(rep, r)
	case <-time.After(wait):
		rep.DataDirHashNote = fmt.Sprintf("being hashed (since %s); ask again", timefmt.At(job.since, time.Now()))
	case <-ctx.Done():
		rep.DataDirHashNote = "being hashed; ask again"
	}
}

// sayHash puts r in rep: the hash, or why none.
func sayHash(rep *Report, r dbHash) {
	if r.err != "" {
		rep.DataDirHashNote = r.err
		return
	}
	hash := r.hash
	rep.DataDirHash = &hash
}

// hash runs job, bounded by hashTimeout, and keeps its answer for the db
// as it was when the job started.
func (h *dbHasher) hash(job *dbHashJob, d localdisk.Dirs, st os.FileInfo) {
	ctx, cancel := context.WithTimeout(context.Background(), hashTimeout)
	defer cancel()
	h.log.Info("hashing the stopped member's db for status --cluster (the majority is lost)", zap.String("db", job.dbPath), zap.Duration("timeout", hashTimeout))
	kv, err := localdisk.HashDBIsolated(ctx, d, h.scratch)
	r := dbHash{size: st.Size(), mod: st.ModTime(), hash: kv, at: time.Now()}
	if err != nil {
		r.err = err.Error()
		h.log.Warn("the stopped member's db could not be hashed", zap.String("db", job.dbPath), zap.Error(err))
	} else {
		h.log.Info("hashed the stopped member's db", zap.String("db", job.dbPath), zap.Uint32("hash", kv.Hash),
			zap.Int64("revision", kv.Revision), zap.Duration("took", time.Since(job.since)))
	}
	h.mu.Lock()
	h.done[job.dbPath], h.running = r, nil
	h.mu.Unlock()
	close(job.done)
}
