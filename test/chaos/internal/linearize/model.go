package linearize

import (
	"fmt"
	"hash/fnv"
	"sort"

	"github.com/anishathalye/porcupine"
)

// input and output are what porcupine sees of an Op; both are comparable
// values so the checker can cache states.
type input struct {
	kind   Kind
	key    string
	value  string
	expect string
}

type output struct {
	known   bool
	read    string
	swapped bool
}

// meta rides along for the visualization only.
type meta struct {
	worker   int
	revision int64
	err      string
}

// registerModel is a register per key: its state is the key's value, ""
// while the key does not exist. The history is partitioned by key, so each
// partition is checked on its own (and in parallel).
var registerModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() any { return "" },
	Step:      step,
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(state.(string)))
		return h.Sum64()
	},
	DescribeOperation: describeOperation,
	DescribeState: func(state any) string {
		if state.(string) == "" {
			return "(absent)"
		}
		return state.(string)
	},
	DescribeOperationMetadata: func(m any) string {
		if m == nil {
			return ""
		}
		x := m.(meta)
		s := fmt.Sprintf("worker %d, revision %d", x.worker, x.revision)
		if x.err != "" {
			s += ", error: " + x.err
		}
		return s
	},
}

// step applies one op to a key's value. A write whose outcome is unknown
// returns at "infinity", so the checker may place it anywhere after its
// call: at the very end it is as if it never happened, which is why the
// model can simply apply it.
func step(state, in, out any) (bool, any) {
	st, i, o := state.(string), in.(input), out.(output)
	switch i.kind {
	case Put:
		return true, i.value
	case Get:
		return o.read == st, st
	case CAS:
		switch {
		case !o.known && st == i.expect:
			return true, i.value
		case !o.known:
			return true, st
		case o.swapped:
			return st == i.expect, i.value
		default: // it failed and read the current value
			return st != i.expect && o.read == st, st
		}
	}
	return false, st
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	var keys []string
	for _, op := range history {
		k := op.Input.(input).key
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	sort.Strings(keys) // a stable order makes the visualization stable
	parts := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, byKey[k])
	}
	return parts
}

func describeOperation(in, out any) string {
	i, o := in.(input), out.(output)
	op := Op{Kind: i.kind, Key: i.key, Value: i.value, Expect: i.expect, Known: o.known, Read: o.read,
		Swapped: o.swapped, Err: "may or may not have happened"}
	return op.String()
}
