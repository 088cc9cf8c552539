// Package snapshotstore keeps etcd snapshots in a blob store that every
// node reaches (--snapshot-store): file:///path (a shared filesystem such as
// NFS or CephFS mounted at the same path on every node) or s3://bucket (any
// S3-compatible store), through gocloud.dev/blob.
//
// An object is one etcd snapshot (`etcdctl snapshot save` format), named by
// cluster ID, time and member, and carries its sha256, size, etcd version
// and origin as metadata. Writes are atomic: S3 makes an object visible
// only when its upload completes; fileblob writes a temp file next to the
// object (no_tmp_dir, so the rename stays on one filesystem), which this
// package fsyncs, then renames. Every read is verified against the sha256
// and size the object carries, so a half-written, truncated or altered
// object is refused, never used.
package snapshotstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// URLs
	_ "gocloud.dev/blob/s3blob"   // s3:// URLs
	"gocloud.dev/gcerrors"
)

// Metadata keys (S3 user metadata is case-insensitive: lower case only).
const (
	metaSHA256      = "sha256"
	metaSize        = "size"
	metaCluster     = "cluster-id"
	metaMember      = "member"
	metaMemberID    = "member-id"
	metaTakenAt     = "taken-at"
	metaEtcdVersion = "etcd-version"
	metaSource      = "source"
	metaRevision    = "revision"
)

// prefix is where the agent's objects live in the bucket.
const prefix = "etcd-agent/"

// ErrCorrupt: an object's content does not match the sha256 or size it
// carries (or it carries none): it is never used.
var ErrCorrupt = errors.New("snapshot object is corrupt")

// Meta describes one snapshot.
type Meta struct {
	ClusterID uint64
	// Member and MemberID: the member whose backup this is (the one being
	// healed or moved); Source names the member it was streamed from.
	Member   string
	MemberID uint64
	Source   string
	TakenAt  time.Time
	SHA256   string // hex
	Size     int64
	// EtcdVersion is the cluster's etcd version when taken; Revision its
	// store revision (0 when unknown).
	EtcdVersion string
	Revision    int64
}

// Object is a stored snapshot.
type Object struct {
	Key  string
	Meta Meta
}

// Store is an opened snapshot store.
type Store struct {
	bucket *blob.Bucket
	url    string
}

// Open opens the store at rawURL: file:///dir (the dir must exist) or
// s3://bucket?endpoint=...&region=...&use_path_style=true (credentials from
// the AWS environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a
// profile). It does not contact the store; Check does.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("snapshot store URL %q: %w", rawURL, err)
	}
	switch u.Scheme {
	case "file":
		if u.Path == "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("snapshot store URL %q: want file:///absolute/dir", rawURL)
		}
		st, err := os.Stat(u.Path)
		if err != nil {
			return nil, fmt.Errorf("snapshot store %s: %w (is the shared filesystem mounted?)", u.Path, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("snapshot store %s is not a directory", u.Path)
		}
		q := u.Query()
		// The temp file next to the object: os.TempDir may be another
		// filesystem, where the final rename would fail or copy.
		q.Set("no_tmp_dir", "true")
		u.RawQuery = q.Encode()
	case "s3":
		if u.Host == "" {
			return nil, fmt.Errorf("snapshot store URL %q: want s3://bucket", rawURL)
		}
	default:
		return nil, fmt.Errorf("snapshot store URL %q: scheme %q is not supported (file:// or s3://)", rawURL, u.Scheme)
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("open snapshot store %s: %s", Redact(rawURL), strings.ReplaceAll(err.Error(), u.String(), Redact(u.String())))
	}
	return &Store{bucket: b, url: Redact(rawURL)}, nil
}

// Redact drops a URL's user info (credentials belong in the environment,
// not in the URL).
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	return u.String()
}

// String names the store for logs.
func (s *Store) String() string { return s.url }

// Close releases the store.
func (s *Store) Close() error { return s.bucket.Close() }

// Check tells whether the store answers, with a bounded list.
func (s *Store) Check(ctx context.Context) error {
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	if _, err := it.Next(ctx); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("snapshot store %s does not answer: %w", s.url, err)
	}
	return nil
}

// Key is the object name of a snapshot: by cluster, then time (so a
// listing is in time order), then member.
func Key(m Meta) string {
	return fmt.Sprintf("%s%016x/%s-%s-%016x.db", prefix, m.ClusterID, m.TakenAt.UTC().Format("20060102T150405.000Z"), m.Member, m.MemberID)
}

// Put uploads the snapshot file at path, whose sha256 and size m states
// (the caller verified them when it took the snapshot); the upload hashes
// what it sends and is aborted, leaving no object, when they differ.
func (s *Store) Put(ctx context.Context, m Meta, path string) (Object, error) {
	if m.ClusterID == 0 || m.Member == "" || m.TakenAt.IsZero() || len(m.SHA256) != 64 || m.Size <= 0 {
		return Object{}, fmt.Errorf("snapshot %s: incomplete description %+v", path, m)
	}
	f, err := os.Open(path)
	if err != nil {
		return Object{}, err
	}
	defer f.Close()
	key := Key(m)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var tmp *os.File // fileblob's temp file, fsynced before the rename
	w, err := s.bucket.NewWriter(wctx, key, &blob.WriterOptions{
		ContentType: "application/octet-stream",
		Metadata:    encode(m),
		BeforeWrite: func(as func(any) bool) error {
			as(&tmp)
			return nil
		},
	})
	if err != nil {
		return Object{}, fmt.Errorf("snapshot store %s: %w", s.url, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), f)
	if err == nil && (n != m.Size || hex.EncodeToString(h.Sum(nil)) != m.SHA256) {
		err = fmt.Errorf("%s changed since it was verified: %d bytes, sha256 %x; want %d bytes, sha256 %s", path, n, h.Sum(nil), m.Size, m.SHA256)
	}
	if err == nil && tmp != nil {
		err = tmp.Sync()
	}
	if err != nil {
		cancel() // a canceled writer is aborted: no object
		_ = w.Close()
		return Object{}, fmt.Errorf("upload %s to %s: %w", path, s.url, err)
	}
	if err := w.Close(); err != nil {
		return Object{}, fmt.Errorf("upload %s to %s: %w", path, s.url, err)
	}
	// A store that drops user metadata (some gateways, file:// with
	// metadata=skip) keeps objects no read would ever accept: say so now,
	// and leave none.
	attrs, err := s.bucket.Attributes(ctx, key)
	if err == nil {
		var got Meta
		if got, err = decode(attrs.Metadata); err == nil && (got.SHA256 != m.SHA256 || got.Size != m.Size) {
			err = fmt.Errorf("the store returned sha256 %s size %d", got.SHA256, got.Size)
		}
	}
	if err != nil {
		_ = s.bucket.Delete(ctx, key)
		return Object{}, fmt.Errorf("upload %s to %s: the object's metadata did not read back (does the store keep user metadata?): %w", path, s.url, err)
	}
	return Object{Key: key, Meta: m}, nil
}

// Get downloads key into dst (a new file: an existing one is an error and
// is left as it is), through a temp file in dst's dir, fsynced, then
// linked in place, verifying the sha256 and size the object carries. A
// mismatch is ErrCorrupt and leaves nothing at dst.
func (s *Store) Get(ctx context.Context, key, dst string) (Meta, error) {
	if _, err := os.Lstat(dst); err == nil {
		return Meta{}, fmt.Errorf("%s exists: not overwritten", dst)
	}
	attrs, err := s.bucket.Attributes(ctx, key)
	if err != nil {
		return Meta{}, fmt.Errorf("snapshot %s in %s: %w", key, s.url, err)
	}
	m, err := decode(attrs.Metadata)
	if err != nil {
		return Meta{}, fmt.Errorf("snapshot %s in %s: %w: %v", key, s.url, ErrCorrupt, err)
	}
	r, err := s.bucket.NewReader(ctx, key, nil)
	if err != nil {
		return Meta{}, fmt.Errorf("snapshot %s in %s: %w", key, s.url, err)
	}
	defer r.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*.part")
	if err != nil {
		return Meta{}, err
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	defer tmp.Close()
	h := sha256.New()
	// One byte more than stated: a longer object is caught too.
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, m.Size+1))
	if err != nil {
		return Meta{}, fmt.Errorf("download %s from %s: %w", key, s.url, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != m.Size || got != m.SHA256 {
		return Meta{}, fmt.Errorf("snapshot %s in %s: %w: %d bytes with sha256 %s, the object says %d bytes with sha256 %s",
			key, s.url, ErrCorrupt, n, got, m.Size, m.SHA256)
	}
	if err := tmp.Sync(); err != nil {
		return Meta{}, err
	}
	if err := tmp.Close(); err != nil {
		return Meta{}, err
	}
	// A link, not a rename: a file that appeared at dst meanwhile is
	// never replaced.
	if err := os.Link(tmp.Name(), dst); err != nil {
		return Meta{}, err
	}
	return m, fsutil.SyncDir(filepath.Dir(dst))
}

// List returns the cluster's snapshots, oldest first. Objects that are not
// complete snapshots of the agent (a fileblob temp file, an object without
// the metadata) are left out: bad lists them.
func (s *Store) List(ctx context.Context, clusterID uint64) (good []Object, bad []string, err error) {
	it := s.bucket.List(&blob.ListOptions{Prefix: fmt.Sprintf("%s%016x/", prefix, clusterID)})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", s.url, err)
		}
		if o.IsDir || !strings.HasSuffix(o.Key, ".db") {
			bad = append(bad, o.Key)
			continue
		}
		attrs, err := s.bucket.Attributes(ctx, o.Key)
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %s: %w", s.url, o.Key, err)
		}
		m, err := decode(attrs.Metadata)
		if err != nil || m.ClusterID != clusterID {
			bad = append(bad, o.Key)
			continue
		}
		good = append(good, Object{Key: o.Key, Meta: m})
	}
	slices.SortFunc(good, func(a, b Object) int { return a.Meta.TakenAt.Compare(b.Meta.TakenAt) })
	return good, bad, nil
}

// Prune deletes the cluster's oldest snapshots beyond the newest keep
// (--snapshot-store-keep; keep < 1 keeps everything). It returns the keys
// deleted.
func (s *Store) Prune(ctx context.Context, clusterID uint64, keep int) ([]string, error) {
	if keep < 1 {
		return nil, nil
	}
	objs, _, err := s.List(ctx, clusterID)
	if err != nil || len(objs) <= keep {
		return nil, err
	}
	var deleted []string
	for _, o := range objs[:len(objs)-keep] {
		if err := s.bucket.Delete(ctx, o.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return deleted, fmt.Errorf("prune %s: %s: %w", s.url, o.Key, err)
		}
		deleted = append(deleted, o.Key)
	}
	return deleted, nil
}

func encode(m Meta) map[string]string {
	return map[string]string{
		metaSHA256:      m.SHA256,
		metaSize:        strconv.FormatInt(m.Size, 10),
		metaCluster:     strconv.FormatUint(m.ClusterID, 16),
		metaMember:      m.Member,
		metaMemberID:    strconv.FormatUint(m.MemberID, 16),
		metaTakenAt:     m.TakenAt.UTC().Format(time.RFC3339Nano),
		metaEtcdVersion: m.EtcdVersion,
		metaSource:      m.Source,
		metaRevision:    strconv.FormatInt(m.Revision, 10),
	}
}

func decode(md map[string]string) (Meta, error) {
	var m Meta
	var err error
	if m.SHA256 = md[metaSHA256]; len(m.SHA256) != 64 {
		return Meta{}, fmt.Errorf("no sha256 in its metadata")
	}
	if _, err := hex.DecodeString(m.SHA256); err != nil {
		return Meta{}, fmt.Errorf("sha256 %q: %w", m.SHA256, err)
	}
	if m.Size, err = strconv.ParseInt(md[metaSize], 10, 64); err != nil || m.Size <= 0 {
		return Meta{}, fmt.Errorf("size %q in its metadata", md[metaSize])
	}
	if m.ClusterID, err = strconv.ParseUint(md[metaCluster], 16, 64); err != nil {
		return Meta{}, fmt.Errorf("cluster ID %q in its metadata", md[metaCluster])
	}
	if m.TakenAt, err = time.Parse(time.RFC3339Nano, md[metaTakenAt]); err != nil {
		return Meta{}, fmt.Errorf("time %q in its metadata", md[metaTakenAt])
	}
	m.MemberID, _ = strconv.ParseUint(md[metaMemberID], 16, 64)
	m.Revision, _ = strconv.ParseInt(md[metaRevision], 10, 64)
	m.Member, m.EtcdVersion, m.Source = md[metaMember], md[metaEtcdVersion], md[metaSource]
	return m, nil
}

// WhyNotAnswering lists the store opened by open, bounded by ctx: "" when
// it answered, else why not.
func WhyNotAnswering(ctx context.Context, open func(ctx context.Context) (*Store, error)) string {
	s, err := open(ctx)
	if err == nil {
		defer s.Close()
		err = s.Check(ctx)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}
