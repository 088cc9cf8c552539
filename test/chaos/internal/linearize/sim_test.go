package linearize

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// simulate builds the history of a correct store: workers issue ops every
// interval with random latencies, each op takes effect at a random instant
// inside its interval, and a failed write takes effect (or not) with even
// odds, its error coming back later.
func simulate(seed uint64, workers, keys int, d, interval time.Duration, failEvery int) History {
	rng := rand.New(rand.NewPCG(seed, 0))
	type slot struct {
		op  *Op
		lin time.Duration // the instant the op takes effect
	}
	var slots []slot
	for w := range workers {
		for at := time.Duration(rng.Int64N(int64(interval))); at < d; {
			latency := time.Millisecond + time.Duration(rng.Int64N(int64(30*time.Millisecond)))
			op := &Op{Worker: w, Call: at, Return: at + latency, Known: true}
			slots = append(slots, slot{op, at + time.Duration(rng.Int64N(int64(latency)))})
			at += latency + interval
		}
	}
	sort.Slice(slots, func(i, j int) bool { return slots[i].lin < slots[j].lin })

	state := make(map[string]string)
	last := make([]map[string]string, workers) // what each worker's CAS expects
	for w := range last {
		last[w] = make(map[string]string)
	}
	for n, s := range slots {
		op := s.op
		op.Key = fmt.Sprintf("k%d", rng.IntN(keys))
		op.Value = fmt.Sprintf("w%d-%d", op.Worker, n)
		switch p := rng.IntN(10); {
		case p < 4:
			op.Kind, op.Value, op.Read = Get, "", state[op.Key]
		case p < 7:
			op.Kind = Put
		default:
			op.Kind, op.Expect = CAS, last[op.Worker][op.Key]
		}
		if op.IsWrite() && failEvery > 0 && rng.IntN(failEvery) == 0 {
			op.Known, op.Err = false, "simulated timeout"
			if rng.IntN(2) == 0 {
				continue // it never happened
			}
		}
		switch {
		case op.Kind == Put:
			state[op.Key] = op.Value
		case op.Kind == CAS && state[op.Key] == op.Expect:
			op.Swapped = op.Known
			state[op.Key] = op.Value
		case op.Kind == CAS:
			op.Read = state[op.Key]
		}
		switch {
		case !op.Known:
			op.Read = ""
		case op.Kind == Put || op.Swapped:
			last[op.Worker][op.Key] = op.Value
		default:
			last[op.Worker][op.Key] = op.Read
		}
	}
	h := History{Start: time.Now()}
	for _, s := range slots {
		h.Ops = append(h.Ops, *s.op)
	}
	sort.Slice(h.Ops, func(i, j int) bool { return h.Ops[i].Call < h.Ops[j].Call })
	return h
}

// A 10-minute soak at 3 workers × ~20 ops/s, with some writes failing, must
// check well inside the soak's budget; a single stale read in it must fail.
func TestCheckTenMinutesOfHistory(t *testing.T) {
	h := simulate(1, 3, 4, 10*time.Minute, 35*time.Millisecond, 200)
	r := Check(h, time.Minute, "")
	t.Logf("%s", r)
	if !r.Ok {
		t.Fatalf("simulated correct store: %s", r)
	}
	if r.Ops < 30000 || r.Indeterminate == 0 || r.FailedWrites == r.Indeterminate || r.Swapped == 0 {
		t.Fatalf("the simulation should have covered ~36k ops, swapped CASes, and failed writes seen and unseen: %s", r)
	}

	bad := History{Start: h.Start, Ops: append([]Op(nil), h.Ops...)}
	i, stale := injectStaleRead(t, bad)
	bad.Ops[i].Read = stale
	if r := Check(bad, time.Minute, ""); r.Ok || r.Unknown {
		t.Fatalf("a stale read (op %d now reads %q) passed: %s", i, stale, r)
	}
}

// injectStaleRead finds a Get that saw the value of write w, with another
// write w0 of the same key acknowledged before w was called and w
// acknowledged before the Get was called: reading w0's value there is
// stale whatever else ran concurrently, since values are unique.
func injectStaleRead(t *testing.T, h History) (int, string) {
	t.Helper()
	type write struct {
		value     string
		call, ret time.Duration
	}
	var done []write // acknowledged writes of the key, in call order
	for i, g := range h.Ops {
		if g.Kind != Get || !g.Known || g.Read == "" {
			continue
		}
		done = done[:0]
		wi := -1
		for _, op := range h.Ops[:i] {
			if op.Key == g.Key && op.Known && (op.Kind == Put || op.Swapped) {
				done = append(done, write{op.Value, op.Call, op.Return})
				if op.Value == g.Read {
					wi = len(done) - 1
				}
			}
		}
		if wi < 0 || done[wi].ret >= g.Call {
			continue
		}
		for _, w0 := range done {
			if w0.value != g.Read && w0.ret < done[wi].call {
				return i, w0.value
			}
		}
	}
	t.Fatal("no get in the history can be made stale")
	return 0, ""
}
