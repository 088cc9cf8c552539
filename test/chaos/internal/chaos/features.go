package chaos

import (
	"github.com/etcd-agent/etcd-agent/internal/lab"
)

// labDiskLimit is each node's disk in the chaos lab when it can be a
// size-limited tmpfs: room for etcd's preallocated WAL segments, a db, a
// seed and a few quarantined copies, small enough to fill in a moment.
const labDiskLimit = 768 << 20

// features is what this machine lets the lab do beyond the plain lab.
type features struct {
	ok  map[feature]bool
	why map[feature]string
}

// availableFeatures asks the lab, which falls back to plain folders when
// it cannot mount (not root), what it could make.
func availableFeatures(l *lab.Lab) features {
	f := features{ok: map[feature]bool{none: true, peerProxy: l.Spec.PeerProxy}, why: map[feature]string{peerProxy: "the lab has no peer proxies"}}
	if ok, why := l.DiskFaultsAvailable(); ok {
		f.ok[diskLimit] = true
	} else {
		f.why[diskLimit] = why
	}
	return f
}

func (f features) has(x feature) bool { return f.ok[x] }

// missing names each catalog fault this machine cannot make, with why.
func (f features) missing() []string {
	var out []string
	for _, k := range Kinds() {
		if need := catalog[k].needs; !f.ok[need] {
			out = append(out, string(k)+": "+f.why[need])
		}
	}
	return out
}
