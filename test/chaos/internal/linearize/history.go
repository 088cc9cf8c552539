// Package linearize records a client history of puts, linearizable gets and
// compare-and-swaps against a few etcd keys, and checks it with porcupine:
// no acknowledged write may be lost and every read must be linearizable.
// It is one invariant of the chaos soak (issue 12).
package linearize

import (
	"fmt"
	"time"
)

// Kind is the operation a worker performed.
type Kind string

const (
	Put Kind = "put"
	Get Kind = "get"
	// CAS is a Txn: If value == Expect Then Put(Value) Else Get, so a failed
	// CAS is also a read.
	CAS Kind = "cas"
)

// Op is one operation of the history. Times are offsets from History.Start
// on the monotonic clock, so they order correctly across workers.
type Op struct {
	Worker int
	Kind   Kind
	Key    string
	// Value is what a Put writes or a CAS writes when it swaps; values are
	// unique per op, so a read names the write it saw.
	Value string
	// Expect is the value a CAS requires; "" means the key must not exist.
	Expect string

	// Known is false for a write that failed (timeout, lost connection,
	// leader change): it may or may not have taken effect, and the checker
	// lets it take effect at any point after Call, or never.
	Known bool
	// Read is what a Get returned, or the current value a failed CAS saw;
	// "" means the key did not exist.
	Read string
	// Swapped says a CAS took its Then branch.
	Swapped bool
	// Revision is the response header's revision (0 when there was no
	// response); kept for diagnosis only, the check does not trust it.
	Revision int64
	// Err is the error of a write whose outcome is unknown.
	Err string

	Call, Return time.Duration
}

// IsWrite says whether the op can change the key.
func (o Op) IsWrite() bool { return o.Kind == Put || o.Kind == CAS }

func (o Op) String() string {
	var s string
	switch o.Kind {
	case Put:
		s = fmt.Sprintf("put(%s, %q)", o.Key, o.Value)
	case Get:
		s = fmt.Sprintf("get(%s)", o.Key)
	case CAS:
		s = fmt.Sprintf("cas(%s, %q→%q)", o.Key, o.Expect, o.Value)
	}
	switch {
	case !o.Known:
		return s + " -> unknown (" + o.Err + ")"
	case o.Kind == Put:
		return s + " -> ok"
	case o.Kind == Get:
		return fmt.Sprintf("%s -> %q", s, o.Read)
	case o.Swapped:
		return s + " -> swapped"
	default:
		return fmt.Sprintf("%s -> failed, was %q", s, o.Read)
	}
}

// History is what a Load recorded.
type History struct {
	// Start is the wall-clock time Op offsets count from.
	Start time.Time
	// Ops are in call order. Gets that failed are not in it (a failed read
	// has no effect), only counted in FailedGets.
	Ops        []Op
	FailedGets int
}
