package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// FillDB writes 512 KiB values under prefix until the db holds about size
// bytes more (the demo's --db-size, the bench's sizes).
func FillDB(ctx context.Context, cli *clientv3.Client, prefix string, size int64) error {
	val := strings.Repeat("x", 512<<10)
	for i := 0; int64(i)*int64(len(val)) < size; i++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := cli.Put(rctx, fmt.Sprintf("%s%06d", prefix, i), val)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}
