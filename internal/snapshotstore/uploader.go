package snapshotstore

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// UploadTimeout bounds one upload (a multi-GiB db over a slow link fits).
const UploadTimeout = 30 * time.Minute

// uploadQueue is how many backups may wait; more are dropped (and counted):
// they stay in the quarantine.
const uploadQueue = 16

// Uploader sends pre-change backups to the store in the background: a heal
// never waits on the store (the backup the safety rules need is the one in
// the quarantine; the store's copy is for UC2/UC3 and people). Each upload
// is bounded by UploadTimeout and logged; then the cluster's objects beyond
// Keep are pruned.
type Uploader struct {
	store *Store
	keep  int
	log   *zap.Logger
	jobs  chan upload
	done  chan struct{}
}

type upload struct {
	meta Meta
	path string
	// result is told the outcome (a metric).
	result func(string)
}

// Upload results (as the metric's label).
const (
	Uploaded = "uploaded"
	Failed   = "failed"
	Dropped  = "dropped"
)

// NewUploader makes an uploader; Run works its queue.
func NewUploader(s *Store, keep int, log *zap.Logger) *Uploader {
	return &Uploader{store: s, keep: keep, log: log, jobs: make(chan upload, uploadQueue), done: make(chan struct{})}
}

// Store is where the uploader sends backups.
func (u *Uploader) Store() *Store { return u.store }

// Enqueue asks for the verified snapshot at path (described by m) to be
// uploaded; it never blocks. result (may be nil) is told the outcome:
// Uploaded, Failed, or Dropped at once when the queue is full (the backup
// is then not uploaded; it stays where it is).
func (u *Uploader) Enqueue(m Meta, path string, result func(string)) bool {
	if result == nil {
		result = func(string) {}
	}
	select {
	case u.jobs <- upload{m, path, result}:
		return true
	default:
		u.log.Warn("snapshot store: upload queue full; this backup stays in the quarantine only", zap.String("member", m.Member), zap.String("path", path))
		result(Dropped)
		return false
	}
}

// Run uploads until ctx ends (an upload under way is then canceled: the
// store keeps no half object).
func (u *Uploader) Run(ctx context.Context) {
	defer close(u.done)
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-u.jobs:
			u.one(ctx, j)
		}
	}
}

// Done is closed when Run has returned.
func (u *Uploader) Done() <-chan struct{} { return u.done }

func (u *Uploader) one(ctx context.Context, j upload) {
	ctx, cancel := context.WithTimeout(ctx, UploadTimeout)
	defer cancel()
	log := u.log.With(zap.String("member", j.meta.Member), zap.String("store", u.store.String()), zap.String("path", j.path))
	log.Info("snapshot store: uploading the pre-change backup", zap.Int64("bytes", j.meta.Size), zap.Duration("timeout", UploadTimeout))
	start := time.Now()
	o, err := u.store.Put(ctx, j.meta, j.path)
	if err != nil {
		log.Error("snapshot store: upload failed; the backup stays in the quarantine", zap.Error(err), zap.Duration("took", time.Since(start)))
		j.result(Failed)
		return
	}
	j.result(Uploaded)
	log.Info("snapshot store: pre-change backup uploaded", zap.String("key", o.Key), zap.String("sha256", o.Meta.SHA256),
		zap.Duration("took", time.Since(start)))
	if deleted, err := u.store.Prune(ctx, j.meta.ClusterID, u.keep); err != nil {
		log.Warn("snapshot store: pruning failed", zap.Error(err))
	} else if len(deleted) > 0 {
		log.Info("snapshot store: pruned snapshots beyond --snapshot-store-keep", zap.Strings("deleted", deleted), zap.Int("keep", u.keep))
	}
}
