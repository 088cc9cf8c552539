package linearize

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is the verdict on a history.
type Result struct {
	// Ok: the history is linearizable.
	Ok bool
	// Unknown: the checker ran out of time before deciding (Ok is false).
	Unknown bool
	// Ops is how many ops were checked.
	Ops int
	// PerKind counts the recorded ops by kind; Swapped, the CASes that swapped.
	PerKind map[Kind]int
	Swapped int
	// FailedWrites are writes whose outcome is unknown; FailedGets, reads
	// that failed (dropped: a read has no effect).
	FailedWrites int
	FailedGets   int
	// Indeterminate is how many failed writes were checked as such: a
	// failed write whose value no one ever saw is dropped instead, since
	// "never happened" then explains everything "happened" could.
	Indeterminate int
	// VizPath is porcupine's HTML visualization of a violation ("" when
	// Ok, or when no path was given); VizErr, why it could not be written.
	VizPath string
	VizErr  string
	Took    time.Duration
}

func (r Result) String() string {
	verdict := "linearizable"
	switch {
	case r.Unknown:
		verdict = "UNDECIDED (checker timed out)"
	case !r.Ok:
		verdict = "NOT LINEARIZABLE"
	}
	s := fmt.Sprintf("%s: %d ops checked (put %d, get %d, cas %d of which %d swapped), %d failed writes (%d indeterminate), %d failed gets, in %s",
		verdict, r.Ops, r.PerKind[Put], r.PerKind[Get], r.PerKind[CAS], r.Swapped, r.FailedWrites, r.Indeterminate,
		r.FailedGets, r.Took.Round(time.Millisecond))
	if r.VizPath != "" {
		s += "; visualization: " + r.VizPath
	}
	if r.VizErr != "" {
		s += "; no visualization: " + r.VizErr
	}
	return s
}

// Check decides whether h is linearizable, giving the checker at most
// timeout (0: no limit). On a violation it writes porcupine's HTML
// visualization to vizPath (if not "") and names it in the result.
func Check(h History, timeout time.Duration, vizPath string) Result {
	began := time.Now()
	ops, r := toPorcupine(h)
	switch porcupine.CheckOperationsTimeout(registerModel, ops, timeout) {
	case porcupine.Ok:
		r.Ok = true
	case porcupine.Unknown:
		r.Unknown = true
	case porcupine.Illegal:
		// Only a failing run pays for the verbose search the picture needs.
		if vizPath != "" {
			_, info := porcupine.CheckOperationsVerbose(registerModel, ops, timeout)
			if err := porcupine.VisualizePath(registerModel, info, vizPath); err != nil {
				r.VizErr = err.Error()
			} else {
				r.VizPath = vizPath
			}
		}
	}
	r.Took = time.Since(began)
	return r
}

// toPorcupine turns the history into porcupine operations: failed writes
// whose value was seen return at "infinity" (after every other op), the
// others are dropped.
func toPorcupine(h History) ([]porcupine.Operation, Result) {
	r := Result{PerKind: make(map[Kind]int), FailedGets: h.FailedGets}
	seen := seenValues(h)
	var end time.Duration // latest known instant of the history
	for _, op := range h.Ops {
		end = max(end, op.Call)
		if op.Known {
			end = max(end, op.Return)
		}
	}
	infinity := int64(end) + 1

	// A worker whose op returns at infinity goes on with a new client id,
	// so the visualization never draws one client's ops overlapping.
	clientOf := make(map[int]int)
	nextClient := 0
	client := func(worker int) int {
		if _, ok := clientOf[worker]; !ok {
			clientOf[worker] = nextClient
			nextClient++
		}
		return clientOf[worker]
	}

	ops := make([]porcupine.Operation, 0, len(h.Ops))
	for _, op := range h.Ops {
		r.PerKind[op.Kind]++
		if op.Swapped {
			r.Swapped++
		}
		ret := int64(op.Return)
		if !op.Known {
			if !op.IsWrite() { // a failed read has no effect
				r.FailedGets++
				continue
			}
			r.FailedWrites++
			if !seen[op.Key][op.Value] {
				continue
			}
			r.Indeterminate++
			ret = infinity
		}
		ops = append(ops, porcupine.Operation{
			ClientId: client(op.Worker),
			Input:    input{kind: op.Kind, key: op.Key, value: op.Value, expect: op.Expect},
			Output:   output{known: op.Known, read: op.Read, swapped: op.Swapped},
			Call:     int64(op.Call),
			Return:   ret,
			Metadata: meta{worker: op.Worker, revision: op.Revision, err: op.Err},
		})
		if !op.Known {
			delete(clientOf, op.Worker)
		}
	}
	r.Ops = len(ops)
	return ops, r
}

// seenValues is, per key, every value some op read or a CAS relied on. A
// failed write whose value is not in it left no trace any op could see.
func seenValues(h History) map[string]map[string]bool {
	seen := make(map[string]map[string]bool)
	mark := func(key, v string) {
		if v == "" {
			return
		}
		if seen[key] == nil {
			seen[key] = make(map[string]bool)
		}
		seen[key][v] = true
	}
	for _, op := range h.Ops {
		if op.Kind == CAS {
			mark(op.Key, op.Expect)
		}
		if op.Known && !op.Swapped {
			mark(op.Key, op.Read)
		}
	}
	return seen
}
