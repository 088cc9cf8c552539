package invariant

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MembershipWatch polls the member list and records the most learners seen
// at once and every membership it saw, to prove "one change at a time".
type MembershipWatch struct {
	cli         *clientv3.Client
	cancel      context.CancelFunc
	done        chan struct{}
	mu          sync.Mutex
	maxLearners int
	changes     []string
}

// StartMembershipWatch polls every interval until Stop.
func StartMembershipWatch(ctx context.Context, cli *clientv3.Client, interval time.Duration) *MembershipWatch {
	wctx, cancel := context.WithCancel(ctx)
	m := &MembershipWatch{cli: cli, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		last := ""
		for {
			rctx, c := context.WithTimeout(wctx, time.Second)
			resp, err := cli.MemberList(rctx)
			c()
			if err == nil {
				learners := 0
				var desc []string
				for _, mem := range resp.Members {
					role := "voter"
					if mem.IsLearner {
						learners++
						role = "learner"
					}
					desc = append(desc, fmt.Sprintf("%s/%x/%s", mem.Name, mem.ID, role))
				}
				sort.Strings(desc)
				s := fmt.Sprint(desc)
				m.mu.Lock()
				m.maxLearners = max(m.maxLearners, learners)
				if s != last {
					m.changes = append(m.changes, time.Now().Format("15:04:05.000")+" "+s)
					last = s
				}
				m.mu.Unlock()
			}
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// Stop ends the watch; it returns the most learners seen at once and the
// sequence of distinct memberships.
func (m *MembershipWatch) Stop() (maxLearners int, changes []string) {
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxLearners, append([]string(nil), m.changes...)
}
