package snapshotstore

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Bounds of the uploader's calls to the store. A hung shared filesystem
// (a hard NFS mount) ignores contexts: each call runs in a goroutine the
// uploader stops waiting for at its bound.
const (
	// UploadTimeout bounds one upload (a multi-GiB db over a slow link fits).
	UploadTimeout = 30 * time.Minute
	// openTimeout bounds opening and checking the store; openRetry spaces
	// the tries while it does not open.
	openTimeout = 30 * time.Second
	openRetry   = time.Minute
)

// uploadQueue is how many backups may wait; more are dropped (and counted):
// they stay in the quarantine.
const uploadQueue = 16

// Uploader sends pre-change backups to the store in the background: a heal
// never waits on the store (the backup the safety rules need is the one in
// the quarantine; the store's copy is for UC2/UC3 and people). It opens the
// store itself, retrying while it cannot; each upload is bounded by
// UploadTimeout and logged; then the cluster's objects beyond keep are
// pruned.
type Uploader struct {
	url  string
	keep int
	log  *zap.Logger
	jobs chan upload
	done chan struct{}
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

// NewUploader makes an uploader for the store at url; Run works its queue.
func NewUploader(url string, keep int, log *zap.Logger) *Uploader {
	return &Uploader{url: url, keep: keep, log: log.With(zap.String("store", Redact(url))), jobs: make(chan upload, uploadQueue), done: make(chan struct{})}
}

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

// Run opens the store and uploads until ctx ends (an upload under way is
// then canceled: the store keeps no half object).
func (u *Uploader) Run(ctx context.Context) {
	defer close(u.done)
	s := u.open(ctx)
	if s == nil {
		return
	}
	defer s.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-u.jobs:
			u.one(ctx, s, j)
		}
	}
}

// Done is closed when Run has returned.
func (u *Uploader) Done() <-chan struct{} { return u.done }

// open opens and checks the store, retrying every openRetry (logged) until
// it answers or ctx ends (nil).
func (u *Uploader) open(ctx context.Context) *Store {
	for {
		var s *Store
		err := bounded(ctx, openTimeout, func(ctx context.Context) error {
			var err error
			if s, err = Open(ctx, u.url); err != nil {
				return err
			}
			return s.Check(ctx)
		})
		if err == nil {
			u.log.Info("snapshot store answers", zap.Int("keep", u.keep))
			return s
		}
		if s != nil {
			_ = s.Close()
		}
		u.log.Warn("snapshot store cannot be used now; backups wait in the queue (they stay in the quarantine)", zap.Error(err), zap.Duration("retryIn", openRetry))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(openRetry):
		}
	}
}

func (u *Uploader) one(ctx context.Context, s *Store, j upload) {
	log := u.log.With(zap.String("member", j.meta.Member), zap.String("path", j.path))
	log.Info("snapshot store: uploading the pre-change backup", zap.Int64("bytes", j.meta.Size), zap.Duration("timeout", UploadTimeout))
	start := time.Now()
	var o Object
	err := bounded(ctx, UploadTimeout, func(ctx context.Context) error {
		var err error
		o, err = s.Put(ctx, j.meta, j.path)
		return err
	})
	if err != nil {
		log.Error("snapshot store: upload failed; the backup stays in the quarantine", zap.Error(err), zap.Duration("took", time.Since(start)))
		j.result(Failed)
		return
	}
	j.result(Uploaded)
	log.Info("snapshot store: pre-change backup uploaded", zap.String("key", o.Key), zap.String("sha256", o.Meta.SHA256),
		zap.Duration("took", time.Since(start)))
	var deleted []string
	if err := bounded(ctx, openTimeout, func(ctx context.Context) error {
		var err error
		deleted, err = s.Prune(ctx, j.meta.ClusterID, u.keep)
		return err
	}); err != nil {
		log.Warn("snapshot store: pruning failed", zap.Error(err))
	} else if len(deleted) > 0 {
		log.Info("snapshot store: pruned snapshots beyond --snapshot-store-keep", zap.Strings("deleted", deleted), zap.Int("keep", u.keep))
	}
}

// bounded runs f with a context of d and returns its error, or stops
// waiting at d (f may be stuck in a call that ignores its context, such as
// a write to a hung filesystem: it is left to finish on its own).
func bounded(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("gave up waiting after %s: %w", d, ctx.Err())
	}
}
