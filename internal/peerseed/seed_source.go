package peerseed

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/fsutil"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// SeedSource is the provenance of a snapshot streamed for seeding. An etcd
// db does not record which cluster it belongs to (nor does the snapshot
// stream), so StreamForSeed writes it next to the db, as <db>.seed.json,
// from the source's Status; BuildDataDir refuses a db without it, or whose
// size or sha256 differ from it.
type SeedSource struct {
	// ClusterID and SourceID are the source member's Status header.
	ClusterID uint64 `json:"-"`
	SourceID  uint64 `json:"-"`
	Endpoint  string `json:"endpoint"`
	// LeaderID and LeaderIndex: the leader's raft index read after the
	// learner was added; the source had applied at least that much
	// (SourceApplied) when the stream began.
	LeaderID      uint64    `json:"-"`
	LeaderIndex   uint64    `json:"leaderRaftIndex"`
	SourceApplied uint64    `json:"sourceAppliedIndex"`
	Size          int64     `json:"size"`
	SHA256        string    `json:"sha256"`
	Version       string    `json:"version,omitempty"`
	StreamedAt    time.Time `json:"streamedAt"`
}

// MarshalJSON writes the IDs in hex, as etcdctl shows them (a JSON
// number would lose precision in jq and friends).
func (s SeedSource) MarshalJSON() ([]byte, error) {
	type plain SeedSource // no methods: no recursion
	return json.Marshal(struct {
		ClusterID string `json:"clusterID"`
		SourceID  string `json:"sourceID"`
		LeaderID  string `json:"leaderID"`
		plain
	}{hexID(s.ClusterID), hexID(s.SourceID), hexID(s.LeaderID), plain(s)})
}

// UnmarshalJSON reads what MarshalJSON writes; on an error s is left as
// it was.
func (s *SeedSource) UnmarshalJSON(b []byte) error {
	type plain SeedSource
	var v struct {
		ClusterID string `json:"clusterID"`
		SourceID  string `json:"sourceID"`
		LeaderID  string `json:"leaderID"`
		plain
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := SeedSource(v.plain)
	var err error
	if out.ClusterID, err = parseHexID(v.ClusterID); err != nil {
		return fmt.Errorf("clusterID: %w", err)
	}
	if out.SourceID, err = parseHexID(v.SourceID); err != nil {
		return fmt.Errorf("sourceID: %w", err)
	}
	if out.LeaderID, err = parseHexID(v.LeaderID); err != nil {
		return fmt.Errorf("leaderID: %w", err)
	}
	*s = out
	return nil
}

func hexID(id uint64) string { return strconv.FormatUint(id, 16) }

func parseHexID(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseUint(s, 16, 64)
}

// SeedSourcePath is where the provenance of the db at dbPath is kept.
func SeedSourcePath(dbPath string) string { return dbPath + ".seed.json" }

// ReadSeedSource reads the provenance of the db at dbPath
// (ErrSeedNoProvenance if it is missing or unreadable).
func ReadSeedSource(dbPath string) (SeedSource, error) {
	b, err := os.ReadFile(SeedSourcePath(dbPath))
	if err != nil {
		return SeedSource{}, fmt.Errorf("%w: %w", ErrSeedNoProvenance, err)
	}
	var s SeedSource
	if err := json.Unmarshal(b, &s); err != nil {
		return SeedSource{}, fmt.Errorf("%w: %s: %w", ErrSeedNoProvenance, SeedSourcePath(dbPath), err)
	}
	if s.ClusterID == 0 || s.Size <= 0 || s.SHA256 == "" {
		return SeedSource{}, fmt.Errorf("%w: %s lacks the cluster ID, size or sha256", ErrSeedNoProvenance, SeedSourcePath(dbPath))
	}
	return s, nil
}

// WriteSeedSource records the provenance of a db that did not come from
// StreamForSeed (one fetched, verified, from the snapshot store), so that
// BuildDataDir can check it as it checks a stream's.
func WriteSeedSource(dbPath string, s SeedSource) error { return writeSeedSource(dbPath, s) }

// writeSeedSource writes the provenance of the db at dbPath atomically
// (temp file, fsync, rename, fsync of the dir).
func writeSeedSource(dbPath string, s SeedSource) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(SeedSourcePath(dbPath), append(b, '\n'), 0o600)
}

// seedPollInterval is how often StreamForSeed asks whether the source has
// applied far enough, and seedWaitLimit how long it waits at most: a
// healthy follower applies within milliseconds; one that lags for long is a
// poor source anyway.
const (
	seedPollInterval = 50 * time.Millisecond
	seedWaitLimit    = 30 * time.Second
)

// StreamForSeed streams a snapshot for seeding a learner that was just
// added: it reads the leader's raft index (after the add, so the add is
// within it), waits until the source member at endpoint has applied at least
// that index (so the snapshot's membership has the learner), streams the
// snapshot into dest with Stream (verified, hash stripped; see Stream for
// needBytes and onProgress), and records its provenance next to it
// (SeedSourcePath). The wait takes at most 30 s (and ctx's deadline).
//
// The source's cluster ID is read before and after the stream and must not
// change (ErrSeedForeignCluster); on any error dest and its record are
// removed (dest itself is never replaced if it existed: see Stream).
func StreamForSeed(ctx context.Context, endpoint string, tlsCfg *tls.Config, dest string, needBytes uint64, onProgress func(int64)) (Snapshot, SeedSource, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return Snapshot{}, SeedSource{}, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	defer cli.Close()

	src, err := waitApplied(ctx, cli, endpoint)
	if err != nil {
		return Snapshot{}, SeedSource{}, err
	}
	snap, err := Stream(ctx, endpoint, tlsCfg, dest, needBytes, onProgress)
	if err != nil {
		return Snapshot{}, SeedSource{}, err
	}
	fail := func(err error) (Snapshot, SeedSource, error) {
		os.Remove(dest)
		os.Remove(SeedSourcePath(dest))
		return Snapshot{}, SeedSource{}, err
	}
	after, err := status(ctx, cli, endpoint)
	if err != nil {
		return fail(err)
	}
	if after.Header.ClusterId != src.ClusterID || after.Header.MemberId != src.SourceID {
		return fail(fmt.Errorf("%w: %s was member %x of cluster %x before the stream, member %x of cluster %x after it",
			ErrSeedForeignCluster, endpoint, src.SourceID, src.ClusterID, after.Header.MemberId, after.Header.ClusterId))
	}
	src.Size, src.SHA256, src.Version, src.StreamedAt = snap.Size, snap.SHA256, snap.Version, time.Now().UTC()
	if err := writeSeedSource(dest, src); err != nil {
		return fail(fmt.Errorf("record the snapshot's provenance: %w", err))
	}
	return snap, src, nil
}

// waitApplied reads the leader's raft index and waits until the member at
// endpoint has applied it.
func waitApplied(ctx context.Context, cli *clientv3.Client, endpoint string) (SeedSource, error) {
	st, err := status(ctx, cli, endpoint)
	if err != nil {
		return SeedSource{}, err
	}
	src := SeedSource{ClusterID: st.Header.ClusterId, SourceID: st.Header.MemberId, Endpoint: endpoint, LeaderID: st.Leader}
	if src.ClusterID == 0 || src.SourceID == 0 {
		return SeedSource{}, fmt.Errorf("%s answered Status without a cluster or member ID", endpoint)
	}
	if src.LeaderID == 0 {
		return SeedSource{}, fmt.Errorf("%s knows no leader", endpoint)
	}
	leaderEP := endpoint
	if src.LeaderID != src.SourceID {
		if leaderEP, err = clientURLOf(ctx, cli, src.LeaderID); err != nil {
			return SeedSource{}, err
		}
	}
	lst, err := status(ctx, cli, leaderEP)
	if err != nil {
		return SeedSource{}, fmt.Errorf("leader: %w", err)
	}
	if lst.Header.ClusterId != src.ClusterID {
		return SeedSource{}, fmt.Errorf("%w: the leader %s is in cluster %x, %s in cluster %x",
			ErrSeedForeignCluster, leaderEP, lst.Header.ClusterId, endpoint, src.ClusterID)
	}
	src.LeaderIndex = lst.RaftIndex
	wctx, cancel := context.WithTimeout(ctx, seedWaitLimit)
	defer cancel()
	for {
		src.SourceApplied = st.RaftAppliedIndex
		if st.RaftAppliedIndex >= src.LeaderIndex {
			return src, nil
		}
		select {
		case <-wctx.Done():
			return SeedSource{}, fmt.Errorf("waiting for %s to apply index %d (applied %d): %w", endpoint, src.LeaderIndex, st.RaftAppliedIndex, wctx.Err())
		case <-time.After(seedPollInterval):
		}
		if st, err = status(wctx, cli, endpoint); err != nil {
			return SeedSource{}, err
		}
	}
}

func status(ctx context.Context, cli *clientv3.Client, endpoint string) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", endpoint, err)
	}
	if st.Header == nil {
		return nil, fmt.Errorf("status of %s has no header", endpoint)
	}
	return st, nil
}

// clientURLOf finds a member's client URL in the member list.
func clientURLOf(ctx context.Context, cli *clientv3.Client, id uint64) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return "", fmt.Errorf("member list: %w", err)
	}
	for _, m := range resp.Members {
		if m.ID == id {
			if len(m.ClientURLs) == 0 {
				return "", fmt.Errorf("member %x has no client URL", id)
			}
			return m.ClientURLs[0], nil
		}
	}
	return "", errors.New("the leader " + hexID(id) + " is not in the member list")
}
