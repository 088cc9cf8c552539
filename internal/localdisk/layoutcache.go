package localdisk

import (
	"os"
	"sync"
	"time"
)

// layoutSettle is how old a directory's change must be before a listing of
// it is reused: a change keeps the mtime of one made in the same clock
// tick, so a listing is reused only when the last change it rests on was
// long before it was made.
const layoutSettle = time.Second

// LayoutCache is ClassifyLayout for a data dir checked every poll: it
// reuses the last ClassOK verdict while the data dir, member/ and
// member/wal are the same directories with the same mtime and ctime (so
// no entry came or went) and member/snap/db is the same regular, non-empty
// file. Four stats instead of three listings; any difference, any error,
// and any verdict but ok lists again. (The watchdog's deep-check cache
// keys on every WAL, snapshot and db file's size and mtime: that needs
// the listings saved here, and a running member's db changes on every
// write; this key holds only what the layout check reads.)
type LayoutCache struct {
	mu  sync.Mutex
	now func() time.Time // tests move the clock
	dir Dirs
	key layoutKey
	res Result
	// listed counts full checks (tests).
	listed int
}

type statKey struct {
	dev, ino     uint64
	mtime, ctime int64
	mode         os.FileMode
	nonEmpty     bool
}

type layoutKey [4]statKey

// Classify returns ClassifyLayout(dataDir), from the last ok verdict when
// reuse is set and nothing it rests on changed. Without reuse it always
// lists (and remembers): a verdict is reused at most until the caller's
// next full check, however coarse or remote the file system's clock.
func (c *LayoutCache) Classify(d Dirs, reuse bool) Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now
	if c.now != nil {
		now = c.now
	}
	key, settled, err := keyOf(d, now())
	if reuse && err == nil && c.dir == d && key == c.key {
		return c.res
	}
	c.dir = Dirs{}
	c.listed++
	r := ClassifyLayout(d)
	if err == nil && settled && r.Class == ClassOK {
		c.dir, c.key, c.res = d, key, r
	}
	return r
}
