package invariant

import (
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// CheckHashKV compares HashKV of every voting member at one revision. A
// member still catching up is polled until it has applied that revision
// or timeout passes. lost names members a scenario lost for good on
// purpose: they are not asked (any other voter that does not answer fails).
func CheckHashKV(ctx context.Context, cli *clientv3.Client, timeout time.Duration, lost ...string) (map[string]uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("member list: %w", err)
	}
	get, err := cli.Get(ctx, "hashkv-probe")
	if err != nil {
		return nil, fmt.Errorf("read current revision: %w", err)
	}
	rev := get.Header.Revision
	hashes := map[string]uint32{}
	for _, m := range ml.Members {
		if m.IsLearner || len(m.ClientURLs) == 0 || slices.Contains(lost, m.Name) {
			continue
		}
		h, err := hashKVAt(ctx, cli, m.ClientURLs[0], rev)
		if err != nil {
			return hashes, fmt.Errorf("member %s: HashKV at revision %d: %w", m.Name, rev, err)
		}
		hashes[m.Name] = h
	}
	var first uint32
	i := 0
	for _, h := range hashes {
		if i == 0 {
			first = h
		} else if h != first {
			return hashes, fmt.Errorf("HashKV differs across voting members at revision %d: %v", rev, hashes)
		}
		i++
	}
	return hashes, nil
}

// hashKVAt asks the member at ep; Maintenance calls dial ep with cli's
// credentials, so this works for TLS clusters too.
func hashKVAt(ctx context.Context, cli *clientv3.Client, ep string, rev int64) (uint32, error) {
	for {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := cli.HashKV(rctx, ep, rev)
		cancel()
		if err == nil {
			return resp.Hash, nil
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
