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
	history     []Membership
}

// Member is one entry of a member list, as the watch saw it.
type Member struct {
	ID      uint64
	Name    string
	Learner bool
}

// Membership is one distinct member list and when the watch saw it: it
// became current after Since (the last poll that saw the one before) and
// by At.
type Membership struct {
	Since, At time.Time
	Members   []Member
}

// StartMembershipWatch polls every interval until Stop.
func StartMembershipWatch(ctx context.Context, cli *clientv3.Client, interval time.Duration) *MembershipWatch {
	wctx, cancel := context.WithCancel(ctx)
	m := &MembershipWatch{cli: cli, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		last, lastOK := "", time.Time{}
		for {
			rctx, c := context.WithTimeout(wctx, time.Second)
			resp, err := cli.MemberList(rctx)
			c()
			if err == nil {
				now := time.Now()
				var ms []Member
				learners := 0
				var desc []string
				for _, mem := range resp.Members {
					role := "voter"
					if mem.IsLearner {
						learners++
						role = "learner"
					}
					desc = append(desc, fmt.Sprintf("%s/%x/%s", mem.Name, mem.ID, role))
					ms = append(ms, Member{ID: mem.ID, Name: mem.Name, Learner: mem.IsLearner})
				}
				sort.Strings(desc)
				s := fmt.Sprint(desc)
				m.mu.Lock()
				m.maxLearners = max(m.maxLearners, learners)
				if s != last {
					m.changes = append(m.changes, now.Format("15:04:05.000")+" "+s)
					m.history = append(m.history, Membership{Since: lastOK, At: now, Members: ms})
					last = s
				}
				lastOK = now
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

// History returns every distinct member list seen so far, oldest first.
func (m *MembershipWatch) History() []Membership {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Membership(nil), m.history...)
}
