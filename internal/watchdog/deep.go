package watchdog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/etcd-agent/etcd-agent/internal/localdisk"
)

// deepCache remembers the deep classification of a data dir while its files
// are unchanged: a stopped member's db can be large, and checking it every
// poll would cost a core.
type deepCache struct {
	mu     sync.Mutex
	key    string
	result localdisk.Result
}

func (c *deepCache) classify(ctx context.Context, dir localdisk.Dirs, exp localdisk.Expect) localdisk.Result {
	files := fingerprint(dir)
	key := files + fmt.Sprintf("|%x|%x|%+v", exp.MemberID, exp.ClusterID, exp.HighWater)
	c.mu.Lock()
	if key == c.key {
		r := c.result
		c.mu.Unlock()
		return r
	}
	c.mu.Unlock()
	r := localdisk.Classify(ctx, dir, exp)
	if r.Class == localdisk.ClassInUse || !r.Verified {
		return r // someone holds it now, or the check did not finish: again next time
	}
	if fingerprint(dir) != files {
		// The files moved during the check (a data dir renamed away and
		// back keeps its files' sizes and mtimes): the verdict may be of
		// neither state, so it is not remembered.
		return r
	}
	c.mu.Lock()
	c.key, c.result = key, r
	c.mu.Unlock()
	return r
}

// fingerprint names the db, WAL and snapshot files (and the skeleton
// marker) by size and mtime.
func fingerprint(dir localdisk.Dirs) string {
	files, _ := filepath.Glob(filepath.Join(dir.WALDir(), "*.wal"))
	files = append(files, filepath.Join(dir.Data, "member", "snap", "db"))
	snaps, _ := filepath.Glob(filepath.Join(dir.Data, "member", "snap", "*.snap"))
	files = append(files, snaps...)
	// The agent's skeleton marker turns the same files into another class.
	files = append(files, localdisk.SkeletonMarker(dir.Data))
	out := ""
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			out += fmt.Sprintf("%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
		}
	}
	return out
}
