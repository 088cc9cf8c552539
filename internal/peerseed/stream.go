package peerseed

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const (
	// progressEvery is how many bytes pass between onProgress calls.
	progressEvery = 4 << 20
	// readChunk and writeBuffer size the copy loop; file writes are batched
	// because the gRPC stream hands over small (32 KiB) chunks.
	readChunk   = 256 << 10
	writeBuffer = 1 << 20
)

// Stream streams a snapshot (Maintenance.SnapshotWithVersion) from the
// single member at endpoint (tlsCfg may be nil) into the file dest, and
// returns it verified: the stream's trailing sha256 matched the db and was
// stripped, so dest is a plain bbolt db. The file is written as dest+".part"
// in dest's dir, fsynced, renamed to dest, and the dir fsynced; on any error
// the .part file is removed and dest is not created. An existing dest is
// never replaced (it may be an earlier backup).
//
// Free space in dest's dir is checked first against needBytes (see
// plan.StreamBytesNeeded): ErrDiskFull. onProgress, if not nil, is called now and then
// with the number of bytes received since its previous call (the calls add
// up to the whole stream), e.g. to feed a counter.
func Stream(ctx context.Context, endpoint string, tlsCfg *tls.Config, dest string, needBytes uint64, onProgress func(int64), opts ...StreamOption) (_ Snapshot, err error) {
	begin := time.Now()
	if err := checkDest(dest, needBytes); err != nil {
		return Snapshot{}, err
	}
	var o streamOptions
	for _, opt := range opts {
		opt(&o)
	}
	cp := o.copyFor(needBytes)
	defer func() {
		if err != nil {
			cp.drop(err) // also when the stream never began
		}
	}()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		TLS:         tlsCfg,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: streamDial,
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	defer cli.Close()

	resp, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("open snapshot stream from %s: %w", endpoint, err)
	}
	defer resp.Snapshot.Close()
	size, sum, err := streamToFile(ctx, resp.Snapshot, dest, onProgress, cp)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot from %s: %w", endpoint, err)
	}
	return Snapshot{
		Path:    dest,
		Copy:    cp.done(),
		CopyErr: cp.error(),
		Size:    size,
		SHA256:  hex.EncodeToString(sum),
		Version: resp.Version,
		Source:  memberName(ctx, cli, endpoint),
		Took:    time.Since(begin),
	}, nil
}

// checkDest refuses to start a stream that could not finish or would
// replace a file.
func checkDest(dest string, needBytes uint64) error {
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("%s already exists; refusing to replace it", dest)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(dest)
	free, err := localdisk.FreeBytes(dir)
	if err != nil {
		return fmt.Errorf("check free space in %s: %w", dir, err)
	}
	if free < needBytes {
		return fmt.Errorf("%w: %s has %d bytes (%d MiB) free, the snapshot needs %d bytes (%d MiB)",
			ErrDiskFull, dir, free, free>>20, needBytes, needBytes>>20)
	}
	return nil
}

// memberName names the member at endpoint (the snapshot stream itself
// carries no header). It is only for reports, so any failure falls back to
// the member's ID or the endpoint.
func memberName(ctx context.Context, cli *clientv3.Client, endpoint string) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, endpoint)
	if err != nil || st.Header == nil {
		return endpoint
	}
	id := st.Header.MemberId
	// Serializable: the source answers from its own member list.
	resp, err := cli.MemberList(ctx, clientv3.WithSerializable())
	if err == nil {
		for _, m := range resp.Members {
			if m.ID == id && m.Name != "" {
				return m.Name
			}
		}
	}
	return fmt.Sprintf("%x", id)
}

// streamToFile copies a snapshot stream (db + sha256) into dest as
// described at Stream, returning the db's size and sha256.
func streamToFile(ctx context.Context, r io.Reader, dest string, onProgress func(int64), cp *streamCopy) (size int64, sum []byte, err error) {
	part := dest + ".part"
	// Never shared: a stream still writing it (one cancelled that has not
	// ended, started in the same second under the same name) keeps it, and
	// this one fails (retried under the next second's name). A killed
	// agent's leftover has an older name, so it never blocks a stream.
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(part)
			if errors.Is(err, syscall.ENOSPC) {
				err = fmt.Errorf("%w: %w", ErrDiskFull, err)
			}
		}
	}()

	defer func() {
		if err != nil {
			cp.drop(err)
		}
	}()
	bw := bufio.NewWriterSize(&writeback{f: f}, writeBuffer)
	tw := newTrailerWriter(cp.beside(bw))
	if err := copyStream(ctx, tw, r, onProgress); err != nil {
		return 0, nil, err
	}
	if sum, err = tw.verify(); err != nil {
		return 0, nil, err
	}
	cp.finish()
	if err := bw.Flush(); err != nil {
		return 0, nil, fmt.Errorf("write %s: %w", part, err)
	}
	if err := f.Sync(); err != nil {
		return 0, nil, fmt.Errorf("fsync %s: %w", part, err)
	}
	if err := f.Close(); err != nil {
		return 0, nil, err
	}
	if err := os.Rename(part, dest); err != nil {
		return 0, nil, err
	}
	if err := fsutil.SyncDir(filepath.Dir(dest)); err != nil {
		// dest is complete, but its name may not survive a crash: the caller
		// must not rely on it, and a stale dest would block a retry.
		os.Remove(dest)
		return 0, nil, err
	}
	return tw.n, sum, nil
}

// copyStream reads r to its end into w, reporting progress.
func copyStream(ctx context.Context, w io.Writer, r io.Reader, onProgress func(int64)) error {
	buf := make([]byte, readChunk)
	var received, unreported int64
	report := func() {
		if onProgress != nil && unreported > 0 {
			onProgress(unreported)
		}
		unreported = 0
	}
	defer report()
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%w after %d bytes: %w", ErrTruncated, received, err)
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return fmt.Errorf("write snapshot: %w", err)
			}
			received += int64(n)
			if unreported += int64(n); unreported >= progressEvery {
				report()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("%w after %d bytes: %w", ErrTruncated, received, rerr)
		}
	}
}
