package plan

import (
	"time"

	"github.com/etcd-agent/etcd-agent/internal/record"
)

// HighWaterSettle is how long a member must keep serving at a progress it
// reported, with no later progress to show, before that progress counts as
// on its disk. A later progress is proof at once: etcd saves a raft Ready's
// entries (fsync) before it takes the next Ready, and a commit index beyond
// a Ready's is only reported from a later one.
const HighWaterSettle = 5 * time.Second

// AdvanceHighWater moves a pin's high-water mark on with seen, the term and
// commit index the member reported serving at seen.At (UC2: a data dir
// behind the mark went back in time). The mark only ever holds progress
// the member kept: the progress reported at one sight becomes the mark at
// a later sight that shows more (or the same, HighWaterSettle later), never
// at once. A member may report a commit index its own disk does not hold
// yet (raft lets a follower apply entries a quorum has, in the Ready that
// saves them), and a mark beyond its disk would make a member killed at
// that moment look rolled back. It returns whether the pin changed.
func AdvanceHighWater(p record.Pin, seen record.Progress) (record.Pin, bool) {
	if seen.Index == 0 || seen.Term == 0 {
		return p, false
	}
	r, changed := p.Reached, false
	if r.Index != 0 && !seen.Behind(r) && (seen.Index > r.Index || seen.At.Sub(r.At) >= HighWaterSettle) && p.HighWater.Behind(r) {
		p.HighWater = p.HighWater.Max(r)
		changed = true
	}
	if r.Index == 0 || seen.Term != r.Term || seen.Index != r.Index {
		// A member that went back (a restart on a restored disk, before
		// the gate held it) starts a new sight: the mark keeps its word.
		p.Reached, changed = seen, true
	}
	return p, changed
}
