// Package chaos runs the randomized fault soak of issue 12: a lab with
// agents, API and etcd load, and a schedule of faults drawn from a catalog
// by a seeded PRNG, with invariants checked on every run. The schedule is
// pure (this file and catalog.go): the same seed draws the same episodes in
// the same order, whatever the lab did meanwhile.
package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Mode is what the schedule may take down.
type Mode string

const (
	// Minority never takes more than one member down on purpose.
	Minority Mode = "minority"
	// Majority takes two of three members down on purpose; the only
	// expected outcomes are refusals and no data or membership change
	// while they are down.
	Majority Mode = "majority"
)

// Episode is one fault on one member slot, maybe with a second fault
// (an API or agent fault) some time into the heal the first one starts.
type Episode struct {
	N    int  `json:"n"`
	Kind Kind `json:"kind"`
	// Slot is the member (0..members-1) the fault hits; for leader/follower
	// faults the runner picks the member with that role when it runs.
	Slot int `json:"slot"`
	// Second is another member slot, for majority faults.
	Second int `json:"second,omitempty"`
	// Hold is how long a fault that is undone (pause, partition, full
	// disk, API stop, majority stop) lasts.
	Hold time.Duration `json:"hold,omitempty"`
	// Extra, when set, happens After into the episode.
	Extra *Extra `json:"extra,omitempty"`
	// Gap is the pause after the cluster settled before the next episode.
	Gap time.Duration `json:"gap"`
}

// Extra is a fault of the control plane at a random moment of a heal.
type Extra struct {
	Kind  Kind          `json:"kind"`
	After time.Duration `json:"after"`
	// Slot is whose agent (agent faults).
	Slot int           `json:"slot"`
	Hold time.Duration `json:"hold,omitempty"`
}

// String is one line of the printed schedule.
func (e Episode) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s slot%d", e.N, e.Kind, e.Slot)
	if catalog[e.Kind].majority {
		fmt.Fprintf(&b, "+slot%d", e.Second)
	}
	if e.Hold > 0 {
		fmt.Fprintf(&b, " hold %s", e.Hold)
	}
	if x := e.Extra; x != nil {
		fmt.Fprintf(&b, " then at +%s %s", x.After, x.Kind)
		if catalog[x.Kind].agent {
			fmt.Fprintf(&b, " slot%d", x.Slot)
		}
		if x.Hold > 0 {
			fmt.Fprintf(&b, " hold %s", x.Hold)
		}
	}
	fmt.Fprintf(&b, " gap %s", e.Gap)
	return b.String()
}

// Schedule draws episodes from a seed. It is not safe for concurrent use.
type Schedule struct {
	Seed    uint64
	Mode    Mode
	members int
	kinds   []Kind // the catalog entries this run may draw, in catalog order
	rng     *rand.Rand
	n       int
	lost    int
}

// MaxNodeLosses bounds the lose-node episodes of one run: each adds a lab
// node, and the lab has room for nine.
const MaxNodeLosses = 2

// NewSchedule returns the schedule of seed for a cluster of members (3 or
// 5) in mode. It draws from the whole catalog of the mode whatever this
// machine can make, so that a seed is the same schedule everywhere; the
// runner skips a fault the machine cannot make (available says which) and
// the report names it. At least one kind must be available.
func NewSchedule(seed uint64, mode Mode, members int, available func(Kind) bool) (*Schedule, error) {
	if members < 3 {
		return nil, fmt.Errorf("chaos needs at least 3 members, got %d", members)
	}
	if mode != Minority && mode != Majority {
		return nil, fmt.Errorf("unknown chaos mode %q (minority or majority)", mode)
	}
	s := &Schedule{Seed: seed, Mode: mode, members: members, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	some := false
	for _, k := range Kinds() {
		f := catalog[k]
		if f.extraOnly || f.majority != (mode == Majority) {
			continue
		}
		s.kinds = append(s.kinds, k)
		some = some || available == nil || available(k)
	}
	if !some {
		return nil, fmt.Errorf("no fault of mode %s is available here", mode)
	}
	return s, nil
}

// Next draws the next episode.
func (s *Schedule) Next() Episode {
	s.n++
	e := Episode{N: s.n}
	for {
		e.Kind = s.kinds[s.rng.IntN(len(s.kinds))]
		if e.Kind != LoseNode || s.lost < MaxNodeLosses {
			break
		}
	}
	if e.Kind == LoseNode {
		s.lost++
	}
	f := catalog[e.Kind]
	e.Slot = s.rng.IntN(s.members)
	if f.majority {
		// Two distinct slots: a majority of three (the runner refuses a
		// majority mode on more members).
		e.Second = (e.Slot + 1 + s.rng.IntN(s.members-1)) % s.members
	}
	if f.hold.max > 0 {
		e.Hold = s.between(f.hold)
	}
	if f.healing && s.rng.IntN(2) == 0 {
		extras := []Kind{APIStopShort, APIStopLong, AgentKill, AgentTerm}
		x := &Extra{Kind: extras[s.rng.IntN(len(extras))], After: s.between(span{0, 25 * time.Second})}
		if catalog[x.Kind].agent {
			// The healing member's own agent half the time, another's else.
			x.Slot = e.Slot
			if s.rng.IntN(2) == 0 {
				x.Slot = s.rng.IntN(s.members)
			}
		}
		if h := catalog[x.Kind].hold; h.max > 0 {
			x.Hold = s.between(h)
		}
		e.Extra = x
	}
	e.Gap = s.between(span{0, 10 * time.Second})
	return e
}

// between draws a duration in [sp.min, sp.max), to the 100 ms.
func (s *Schedule) between(sp span) time.Duration {
	steps := int64((sp.max - sp.min) / (100 * time.Millisecond))
	if steps <= 0 {
		return sp.min
	}
	return sp.min + time.Duration(s.rng.Int64N(steps))*100*time.Millisecond
}
