package heal

import (
	"context"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/plan"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Cluster is the etcd API the executor uses, behind an interface so that
// its paths (fail, finish, timeout, shutdown) are unit-tested without a lab.
// endpoints are the client URLs to send the call to (the serving voters of
// the fresh observation, or the one member a call concerns). Errors keep
// etcd's own (rpctypes) so errors.Is works as with clientv3.
type Cluster interface {
	MemberRemove(ctx context.Context, endpoints []string, id uint64) error
	// MemberAddAsLearner returns the new learner's ID.
	MemberAddAsLearner(ctx context.Context, endpoints, peerURLs []string) (uint64, error)
	MemberPromote(ctx context.Context, endpoints []string, id uint64) error
	MoveLeader(ctx context.Context, endpoints []string, to uint64) error
	// MemberListOf is the member list as the member at endpoint has applied
	// it (serializable: its own view, as it answers a starting peer).
	MemberListOf(ctx context.Context, endpoint string) ([]plan.ListedMember, error)
	// Revision is the current revision (a linearizable read).
	Revision(ctx context.Context, endpoints []string) (int64, error)
	// HashKV is the KV hash of the member at endpoint, at rev.
	// compactRev is the member's compact revision (hashes compare only at the same one).
	HashKV(ctx context.Context, endpoints []string, endpoint string, rev int64) (hash uint32, compactRev int64, err error)
}

// etcdCluster is the production Cluster: one clientv3 client per call, as
// each change goes to the voters of a fresh observation.
type etcdCluster struct{ cfg *Config }

func (c etcdCluster) client(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, TLS: c.cfg.TLS, Logger: zap.NewNop()})
}

func (c etcdCluster) with(endpoints []string, do func(*clientv3.Client) error) error {
	cli, err := c.client(endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	return do(cli)
}

func (c etcdCluster) MemberRemove(ctx context.Context, eps []string, id uint64) error {
	return c.with(eps, func(cli *clientv3.Client) error { _, err := cli.MemberRemove(ctx, id); return err })
}

func (c etcdCluster) MemberAddAsLearner(ctx context.Context, eps, peerURLs []string) (id uint64, err error) {
	err = c.with(eps, func(cli *clientv3.Client) error {
		resp, err := cli.MemberAddAsLearner(ctx, peerURLs)
		if err == nil {
			id = resp.Member.ID
		}
		return err
	})
	return id, err
}

func (c etcdCluster) MemberPromote(ctx context.Context, eps []string, id uint64) error {
	return c.with(eps, func(cli *clientv3.Client) error { _, err := cli.MemberPromote(ctx, id); return err })
}

func (c etcdCluster) MoveLeader(ctx context.Context, eps []string, to uint64) error {
	return c.with(eps, func(cli *clientv3.Client) error { _, err := cli.MoveLeader(ctx, to); return err })
}

func (c etcdCluster) MemberListOf(ctx context.Context, endpoint string) (list []plan.ListedMember, err error) {
	err = c.with([]string{endpoint}, func(cli *clientv3.Client) error {
		resp, err := cli.MemberList(ctx, clientv3.WithSerializable())
		if err != nil {
			return err
		}
		for _, m := range resp.Members {
			list = append(list, plan.ListedMember{ID: m.ID, PeerURLs: m.PeerURLs})
		}
		return nil
	})
	return list, err
}

func (c etcdCluster) Revision(ctx context.Context, eps []string) (rev int64, err error) {
	err = c.with(eps, func(cli *clientv3.Client) error {
		get, err := cli.Get(ctx, "etcd-agent-verify")
		if err == nil {
			rev = get.Header.Revision
		}
		return err
	})
	return rev, err
}

func (c etcdCluster) HashKV(ctx context.Context, eps []string, endpoint string, rev int64) (hash uint32, compactRev int64, err error) {
	err = c.with(eps, func(cli *clientv3.Client) error {
		hr, err := cli.HashKV(ctx, endpoint, rev)
		if err == nil {
			hash, compactRev = hr.Hash, hr.CompactRevision
		}
		return err
	})
	return hash, compactRev, err
}
