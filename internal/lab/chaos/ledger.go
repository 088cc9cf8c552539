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
// dir etcd made afresh from one that was moved back.
type ledger struct {
	mu         sync.Mutex
	clusterID  uint64
	seen       map[uint64]*memberDir // by inode
	firstDir   map[uint64]uint64     // member ID → inode of the first dir seen for it
	destroyed  map[uint64]string     // inode → the fault that removed it
	violations []string
	moves      []dirEvent
}

type memberDir struct {
	Node, Path          string
	MemberID, ClusterID uint64
	FirstSeen           time.Time
}

// dirEvent is a member dir appearing or moving, for the majority-mode
// check that nothing changed while the majority was down.
type dirEvent struct {
	At   time.Time
	What string
}

func newLedger(clusterID uint64) *ledger {
	return &ledger{clusterID: clusterID, seen: map[uint64]*memberDir{}, firstDir: map[uint64]uint64{}, destroyed: map[uint64]string{}}
}

// maxDepth bounds the walk: disk/etcd-agent-quarantine/<copy>/member is 3 deep.
const maxDepth = 5

// memberDirs lists the member dirs under a node's disk by inode.
func memberDirs(disk string) map[uint64]string {
	out := map[uint64]string{}
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

func inode(path string) (uint64, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return sys.Ino, true
}

// scan records the member dirs on every node's disk now.
func (g *ledger) scan(nodes []lab.Node) {
	now := time.Now()
	for _, n := range nodes {
		for ino, p := range memberDirs(n.DiskDir) {
			g.mu.Lock()
			old, known := g.seen[ino]
			g.mu.Unlock()
			if known {
				if old.Path != p {
					g.note(dirEvent{At: now, What: fmt.Sprintf("member dir of %x moved %s → %s", old.MemberID, old.Path, p)})
					g.mu.Lock()
					old.Path = p
					g.mu.Unlock()
				}
				continue
			}
			mid, cid, err := localdisk.ReadWALIdentity(filepath.Join(p, "wal"))
			if err != nil {
				continue // being written: the next scan reads it
			}
			g.add(ino, &memberDir{Node: n.Name, Path: p, MemberID: mid, ClusterID: cid, FirstSeen: now})
		}
	}
}

func (g *ledger) note(e dirEvent) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.moves = append(g.moves, e)
}

func (g *ledger) add(ino uint64, d *memberDir) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen[ino] = d
	g.moves = append(g.moves, dirEvent{At: d.FirstSeen, What: fmt.Sprintf("member dir of %x appeared at %s", d.MemberID, d.Path)})
	if g.clusterID != 0 && d.ClusterID != g.clusterID {
		g.violations = append(g.violations, fmt.Sprintf("foreign data dir %s: its WAL names cluster %x, the lab's is %x", d.Path, d.ClusterID, g.clusterID))
	}
	if first, ok := g.firstDir[d.MemberID]; ok && first != ino {
		prev := g.seen[first]
		g.violations = append(g.violations, fmt.Sprintf("etcd made a fresh data dir %s (%s) under member ID %x, which had data in %s: a member started on empty data under an old ID",
			d.Path, d.FirstSeen.Format("15:04:05.000"), d.MemberID, prev.Path))
		return
	}
	g.firstDir[d.MemberID] = ino
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
	g.destroyed[ino] = why
}

// destroyNode marks every member dir on a node's disk as removed (the node
// was lost with its disk).
func (g *ledger) destroyNode(n lab.Node, why string) {
	dirs := memberDirs(n.DiskDir)
	g.mu.Lock()
	defer g.mu.Unlock()
	for ino := range dirs {
		g.destroyed[ino] = why
	}
}

// finish scans once more and returns every violation: fresh dirs under
// old IDs, foreign dirs, and any dir seen that is gone though no fault
// removed it (the agent must never delete data: in use or quarantined).
func (g *ledger) finish(nodes []lab.Node) []string {
	g.scan(nodes)
	present := map[uint64]bool{}
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
		if !present[ino] && g.destroyed[ino] == "" {
			gone = append(gone, fmt.Sprintf("data dir of member %x last seen at %s (node %s) was deleted: neither in use nor quarantined", d.MemberID, d.Path, d.Node))
		}
	}
	sort.Strings(gone)
	return append(out, gone...)
}

// seenDirs is how many distinct member dirs the run saw.
func (g *ledger) seenDirs() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
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
