package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// identityWatch asks every running etcd process who it is (its own Status)
// and keeps what breaks identity: two live processes answering as one
// member ID, and a process started under an ID already removed.
type identityWatch struct {
	clientFor func(url string) (*clientv3.Client, error)

	mu         sync.Mutex
	started    map[string]startedProc // "node/pid" → first answer
	violations []string
	starts     int
}

type startedProc struct {
	ID uint64
	At time.Time
}

func newIdentityWatch(clientFor func(string) (*clientv3.Client, error)) *identityWatch {
	return &identityWatch{clientFor: clientFor, started: map[string]startedProc{}}
}

// round asks each node's running etcd for its member ID; removedAt says
// when an ID left the member list (zero: it has not).
func (w *identityWatch) round(ctx context.Context, nodes []lab.Node, removedAt func(uint64) time.Time) {
	byID := map[uint64][]string{}
	now := time.Now()
	for _, n := range nodes {
		if n.Lost || n.ClientURL == "" {
			continue
		}
		pid, running := n.RunningEtcdPID()
		if !running {
			continue
		}
		cli, err := w.clientFor(n.ClientURL)
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, n.ClientURL)
		cancel()
		if err != nil || st.Header == nil {
			continue // starting, stopping or paused: asked again next round
		}
		if again, ok := n.RunningEtcdPID(); !ok || again != pid {
			continue // replaced while we asked: the answer may be the new one's
		}
		id := st.Header.MemberId
		born := processStart(pid)
		if born.IsZero() {
			continue // died while we asked
		}
		// With its start time: a PID reused by a later process is another key.
		key := fmt.Sprintf("%s/%d@%s", n.Name, pid, born.Format("15:04:05.00"))
		byID[id] = append(byID[id], key)
		w.mu.Lock()
		if p, ok := w.started[key]; !ok {
			w.started[key] = startedProc{ID: id, At: now}
			w.starts++
			// Started after the list lost its ID (the watch polls, so
			// allow it a poll's lag): the ID was reused.
			if rm := removedAt(id); !rm.IsZero() && born.After(rm.Add(2*time.Second)) {
				w.violations = append(w.violations, fmt.Sprintf("etcd %s started at %s under member ID %x, removed from the cluster by %s",
					key, born.Format("15:04:05.000"), id, rm.Format("15:04:05.000")))
			}
		} else if p.ID != id {
			w.violations = append(w.violations, fmt.Sprintf("etcd %s answered as member %x, then as %x", key, p.ID, id))
		}
		w.mu.Unlock()
	}
	for id, procs := range byID {
		if len(procs) > 1 {
			sort.Strings(procs)
			w.mu.Lock()
			w.violations = append(w.violations, fmt.Sprintf("%s: two live etcd processes for member %x: %s", now.Format("15:04:05.000"), id, strings.Join(procs, ", ")))
			w.mu.Unlock()
		}
	}
}

func (w *identityWatch) result() (starts int, violations []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts, append([]string(nil), w.violations...)
}

// processStart is when pid started, from /proc (zero if it is gone):
// field 22 of /proc/pid/stat in clock ticks since boot, plus /proc/stat's
// btime. USER_HZ is 100 on every Linux the lab runs on.
func processStart(pid int) time.Time {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}
	}
	// The command name (field 2) may hold spaces: count after its ')'.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 20 {
		return time.Time{}
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64)
	if err != nil {
		return time.Time{}
	}
	boot := bootTime()
	if boot.IsZero() {
		return time.Time{}
	}
	return boot.Add(time.Duration(ticks) * 10 * time.Millisecond)
}

func bootTime() time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			if sec, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
}
