package invariant

import "time"

// PurgeTick bounds how long after its data dir is wiped a running member's
// purge loop ends it: etcd's loop ticks every 30 s (purgeFileInterval), and
// a tick late on a loaded machine gets 5 s more.
const PurgeTick = 35 * time.Second

// NodeEvent is something that happened on one lab node at a time; for a
// hosted member, Node names its pod (ns/pod) instead, as a member moves.
type NodeEvent struct {
	Node string
	At   time.Time
}

// WipedPurgeCrashes are the purge fatals (Options.PurgeCrashes) that a wipe
// explains: on the node whose data dir was wiped, at or after the wipe and
// within PurgeTick of it. A purge fatal on another node, or long after, is
// a crash of its own, and a write it failed is not excused.
func WipedPurgeCrashes(wipes, fatals []NodeEvent) []time.Time {
	var out []time.Time
	for _, f := range fatals {
		for _, w := range wipes {
			if w.Node == f.Node && !f.At.Before(w.At) && f.At.Sub(w.At) <= PurgeTick {
				out = append(out, f.At)
				break
			}
		}
	}
	return out
}
