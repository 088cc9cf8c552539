package chaos

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/lab"
	"github.com/etcd-agent/etcd-agent/internal/localdisk"
)

// ledger keeps every etcd member dir ("member" holding "wal") ever seen on
// a node's disk, by inode: a rename (quarantine, put-back) keeps the
// inode, so the ledger can tell a kept data dir from a deleted one, and a
// dir etcd made afresh from one that was moved back. Its rules hold for
// the dirs that were ever a member's data dir (seen at the node's data dir
// path): an agent's seed in the making may be retried and thrown away.
type ledger struct {
	mu        sync.Mutex
	clusterID uint64
	seen      map[fileID]*memberDir // the dirs on disk now
	all       []*memberDir          // every dir ever seen, removed ones too
	firstDir  map[uint64]*memberDir // member ID → the first data dir it had
	// tombs are dirs a fault is removing (marked before it starts): a scan
	// that still finds one skips it, until a scan no longer does.
	tombs      map[fileID]tomb
	violations []string
	moves      []dirEvent
}

type memberDir struct {
	Node, Path          string
	MemberID, ClusterID uint64
	FirstSeen           time.Time
	InUse               bool   // seen at the node's data dir path
	Destroyed           string // the fault that removed it
	Gone                bool   // its inode now holds another member's dir
}

// dirEvent is a member dir appearing or moving, for the majority-mode
// check that nothing changed while the majority was down.
type dirEvent struct {
	At   time.Time
	What string
}

func newLedger(clusterID uint64) *ledger {
	return &ledger{clusterID: clusterID, seen: map[fileID]*memberDir{}, firstDir: map[uint64]*memberDir{}, tombs: map[fileID]tomb{}}
}

// maxDepth bounds the walk: disk/etcd-agent-quarantine/<copy>/member is 3 deep.
const maxDepth = 5

// memberDirs lists the member dirs under a node's disk by inode.
func memberDirs(disk string) map[fileID]string {
	out := map[fileID]string{}
	_ = filepath.WalkDir(disk, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished under us (etcd or the agent at work): the next scan sees it
		}
		if !d.IsDir() {
			return nil
		}
		if rel, _ := filepath.Rel(disk, p); strings.Count(rel, string(filepath.Separator)) >= maxDepth {
			return fs.SkipDir
		}
		if d.Name() != "member" {
			return nil
		}
		if st, err := os.Stat(filepath.Join(p, "wal")); err == nil && st.IsDir() {
			if ino, ok := inode(p); ok {
				out[ino] = p
			}
		}
		return fs.SkipDir
	})
	return out
}

// tomb is a dir being removed: its member ID and change time (a dir made
// afresh on its inode, under the same ID, has a later one).
type tomb struct {
	memberID uint64
	ctime    int64
}

func ctimeOf(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Ctim.Nano()
	}
	return 0
}

// fileID is a file's device and inode: each lab node's disk may be a
// filesystem of its own.
type fileID struct{ dev, ino uint64 }

func inode(path string) (fileID, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(sys.Dev), ino: sys.Ino}, true
}

// scan records the member dirs on every node's disk now.
func (g *ledger) scan(nodes []lab.Node) {
	now := time.Now()
	found := map[fileID]bool{}
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for ino := range g.tombs {
			if !found[ino] {
				delete(g.tombs, ino) // gone at last: its inode may be reused
			}
		}
	}()
	for _, n := range nodes {
		for ino, p := range memberDirs(n.DiskDir) {
			found[ino] = true
			mid, cid, err := localdisk.ReadWALIdentity(filepath.Join(p, "wal"))
			if err != nil {
				continue // being written: the next scan reads it
			}
			g.mu.Lock()
			if tb, ok := g.tombs[ino]; ok && tb == (tomb{mid, ctimeOf(p)}) {
				g.mu.Unlock()
				continue // a fault is removing it
			}
			d, known := g.seen[ino]
			if known && d.MemberID != mid {
				// The inode was freed and reused: the dir we knew is gone.
				d.Gone, known = true, false
			}
			if !known {
				d = &memberDir{Node: n.Name, Path: p, MemberID: mid, ClusterID: cid, FirstSeen: now}
				g.seen[ino] = d
				g.all = append(g.all, d)
			}
			g.mu.Unlock()
			if !known {
				g.note(dirEvent{At: now, What: fmt.Sprintf("member dir of %x appeared at %s", mid, p)})
			} else if d.Path != p {
				g.note(dirEvent{At: now, What: fmt.Sprintf("member dir of %x moved %s → %s", d.MemberID, d.Path, p)})
				g.mu.Lock()
				d.Path = p
				g.mu.Unlock()
			}
			if n.DataDir != "" && p == filepath.Join(n.DataDir, "member") {
				g.inUse(d)
			}
		}
	}
}

func (g *ledger) note(e dirEvent) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.moves = append(g.moves, e)
}

// inUse applies the rules to a dir the first time it is a data dir.
func (g *ledger) inUse(d *memberDir) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d.InUse {
		return
	}
	d.InUse = true
	if g.clusterID != 0 && d.ClusterID != g.clusterID {
		g.violations = append(g.violations, fmt.Sprintf("foreign data dir %s: its WAL names cluster %x, the lab's is %x", d.Path, d.ClusterID, g.clusterID))
	}
	if prev, ok := g.firstDir[d.MemberID]; ok && prev != d {
		g.violations = append(g.violations, fmt.Sprintf("etcd made a fresh data dir %s (%s) under member ID %x, which had data in %s: a member started on empty data under an old ID",
			d.Path, d.FirstSeen.Format("15:04:05.000"), d.MemberID, prev.Path))
		return
	}
	g.firstDir[d.MemberID] = d
}

// destroy marks the member dir at dataDir as removed by the fault why
// (called right before the fault removes it).
func (g *ledger) destroy(dataDir, why string) {
	ino, ok := inode(filepath.Join(dataDir, "member"))
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forget(ino, why)
}

// forget drops the dir at ino from the dirs on disk (g.mu held): a new dir
// may get its inode number.
func (g *ledger) forget(ino fileID, why string) {
	if d, ok := g.seen[ino]; ok {
		d.Destroyed = why
		delete(g.seen, ino)
		g.tombs[ino] = tomb{d.MemberID, ctimeOf(d.Path)}
	}
}

// destroyNode marks every member dir on a node's disk as removed (the node
// was lost with its disk).
func (g *ledger) destroyNode(n lab.Node, why string) {
	dirs := memberDirs(n.DiskDir)
	g.mu.Lock()
	defer g.mu.Unlock()
	for ino := range dirs {
		g.forget(ino, why)
	}
}

// finish scans once more and returns every violation: fresh dirs under
// old IDs, foreign dirs, and any dir seen that is gone though no fault
// removed it (the agent must never delete data: in use or quarantined).
func (g *ledger) finish(nodes []lab.Node) []string {
	g.scan(nodes)
	present := map[fileID]bool{}
	for _, n := range nodes {
		for ino := range memberDirs(n.DiskDir) {
			present[ino] = true
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := append([]string(nil), g.violations...)
	var gone []string
	for ino, d := range g.seen {
		if !present[ino] {
			d.Gone = true
		}
	}
	for _, d := range g.all {
		if d.InUse && d.Gone && d.Destroyed == "" {
			gone = append(gone, fmt.Sprintf("data dir of member %x last seen at %s (node %s) was deleted: neither in use nor quarantined", d.MemberID, d.Path, d.Node))
		}
	}
	sort.Strings(gone)
	return append(out, gone...)
}

// seenDirs is how many distinct data dirs the run saw in use.
func (g *ledger) seenDirs() (n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range g.all {
		if d.InUse {
			n++
		}
	}
	return n
}

// changesBetween lists the member dirs that appeared or moved in [from, to].
func (g *ledger) changesBetween(from, to time.Time) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, e := range g.moves {
		if !e.At.Before(from) && !e.At.After(to) {
			out = append(out, e.What)
		}
	}
	return out
}
