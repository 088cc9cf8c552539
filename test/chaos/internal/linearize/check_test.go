package linearize

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Hand-built histories on one key; times are in milliseconds.

func put(w int, v string, call, ret int) Op {
	return Op{Worker: w, Kind: Put, Key: "k", Value: v, Known: true, Call: ms(call), Return: ms(ret)}
}

func get(w int, read string, call, ret int) Op {
	return Op{Worker: w, Kind: Get, Key: "k", Read: read, Known: true, Call: ms(call), Return: ms(ret)}
}

func cas(w int, expect, v string, swapped bool, read string, call, ret int) Op {
	return Op{Worker: w, Kind: CAS, Key: "k", Expect: expect, Value: v, Swapped: swapped, Read: read, Known: true,
		Call: ms(call), Return: ms(ret)}
}

// failed makes a write's outcome unknown, its error coming back at ret.
func failed(op Op) Op {
	op.Known, op.Err, op.Read, op.Swapped = false, "context deadline exceeded", "", false
	return op
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name          string
		ops           []Op
		ok            bool
		indeterminate int
	}{
		{"sequential puts, gets and CASes", []Op{
			get(0, "", 0, 5), put(0, "a", 10, 20), get(1, "a", 25, 30), cas(0, "a", "b", true, "", 40, 50),
			cas(1, "a", "c", false, "b", 60, 70), get(1, "b", 80, 90)}, true, 0},
		{"a get concurrent with a put may see either value", []Op{
			put(0, "a", 0, 10), put(0, "b", 20, 40), get(1, "a", 25, 35), get(2, "b", 26, 36)}, true, 0},
		{"a CAS on an absent key", []Op{cas(0, "", "a", true, "", 0, 10), get(1, "a", 20, 30)}, true, 0},
		{"stale read: a get returns a value overwritten before it was called", []Op{
			put(0, "a", 0, 10), put(0, "b", 20, 30), get(1, "a", 40, 50)}, false, 0},
		{"reads go back in time", []Op{
			put(0, "a", 0, 10), put(0, "b", 20, 60), get(1, "b", 25, 30), get(1, "a", 40, 50)}, false, 0},
		{"lost acknowledged write: no concurrent write explains the old value", []Op{
			put(0, "a", 0, 10), get(1, "a", 12, 14), put(0, "b", 20, 30), get(1, "a", 40, 50), put(2, "c", 60, 70)}, false, 0},
		{"lost first write: the key reads absent after an acked put", []Op{put(0, "a", 0, 10), get(1, "", 20, 30)}, false, 0},
		{"indeterminate put whose value is read later", []Op{
			put(0, "a", 0, 10), failed(put(0, "b", 20, 30)), get(1, "a", 40, 50), get(1, "b", 60, 70), get(2, "b", 80, 90)},
			true, 1},
		{"indeterminate put never read", []Op{
			put(0, "a", 0, 10), failed(put(0, "b", 20, 30)), get(1, "a", 40, 50), get(1, "a", 60, 70)}, true, 0},
		{"an indeterminate put, once read, cannot be undone", []Op{
			put(0, "a", 0, 10), failed(put(0, "b", 20, 30)), get(1, "b", 40, 50), get(1, "a", 60, 70)}, false, 1},
		{"an indeterminate put cannot take effect before its call", []Op{
			put(0, "a", 0, 10), get(1, "b", 12, 15), failed(put(0, "b", 20, 30))}, false, 1},
		{"indeterminate CAS whose value is read", []Op{
			put(0, "a", 0, 10), failed(cas(0, "a", "b", false, "", 20, 30)), get(1, "b", 40, 50)}, true, 1},
		{"indeterminate CAS against a value that was not current cannot be read", []Op{
			put(0, "a", 0, 10), put(0, "b", 12, 15), failed(cas(0, "a", "c", false, "", 20, 30)), get(1, "c", 40, 50)},
			false, 1},
		{"CAS swapped against a value that was not current", []Op{
			put(0, "a", 0, 10), put(1, "b", 20, 30), cas(0, "a", "c", true, "", 40, 50)}, false, 0},
		{"CAS failed although its expected value was current", []Op{
			put(0, "a", 0, 10), cas(1, "a", "c", false, "a", 20, 30)}, false, 0},
		{"CAS failed and read a value that was not current", []Op{
			put(0, "a", 0, 10), put(0, "b", 20, 30), cas(1, "x", "c", false, "a", 40, 50)}, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Check(History{Ops: c.ops}, 10*time.Second, "")
			if r.Ok != c.ok || r.Unknown {
				t.Fatalf("got %s, want ok=%v", r, c.ok)
			}
			if r.Indeterminate != c.indeterminate {
				t.Errorf("%d indeterminate, want %d", r.Indeterminate, c.indeterminate)
			}
		})
	}
}

func TestCheckPartitionsByKey(t *testing.T) {
	// Each key alone is linearizable; read as one register it would not be.
	a := put(0, "a", 0, 10)
	b := put(1, "b", 20, 30)
	b.Key = "other"
	g := get(2, "a", 40, 50)
	if r := Check(History{Ops: []Op{a, b, g}}, 10*time.Second, ""); !r.Ok {
		t.Fatalf("keys are independent registers: %s", r)
	}
	g.Key = "other"
	if r := Check(History{Ops: []Op{a, b, g}}, 10*time.Second, ""); r.Ok {
		t.Fatalf("reading a's value under another key passed: %s", r)
	}
}

func TestCheckCounts(t *testing.T) {
	h := History{FailedGets: 2, Ops: []Op{
		put(0, "a", 0, 10), failed(put(0, "b", 20, 30)), failed(put(1, "c", 20, 30)), get(1, "c", 40, 50),
		cas(0, "c", "d", true, "", 60, 70), cas(0, "c", "e", false, "d", 80, 90)}}
	r := Check(h, 10*time.Second, "")
	want := Result{Ok: true, Ops: 5, Swapped: 1, FailedWrites: 2, FailedGets: 2, Indeterminate: 1}
	if r.Ok != want.Ok || r.Ops != want.Ops || r.Swapped != want.Swapped || r.FailedWrites != want.FailedWrites ||
		r.FailedGets != want.FailedGets || r.Indeterminate != want.Indeterminate {
		t.Fatalf("got %s, want %s", r, want)
	}
	if r.PerKind[Put] != 3 || r.PerKind[Get] != 1 || r.PerKind[CAS] != 2 {
		t.Errorf("per kind %v", r.PerKind)
	}
}

func TestIndeterminateWritesReturnAfterEveryOtherOp(t *testing.T) {
	h := History{Ops: []Op{put(0, "a", 0, 10), failed(put(0, "b", 20, 30)), get(1, "b", 40, 500), put(0, "c", 50, 60)}}
	ops, _ := toPorcupine(h)
	var last int64
	for _, op := range ops {
		if op.Input.(input).value != "b" {
			last = max(last, op.Return)
		}
	}
	for _, op := range ops {
		if op.Input.(input).value == "b" && op.Return <= last {
			t.Fatalf("indeterminate put returns at %d, not after every other op (%d)", op.Return, last)
		}
	}
	// Worker 0 goes on under a new client id after its unknown write.
	if ops[0].ClientId == ops[3].ClientId || ops[1].ClientId != ops[0].ClientId {
		t.Fatalf("client ids %d %d %d: want a new one after the unknown write", ops[0].ClientId, ops[1].ClientId, ops[3].ClientId)
	}
}

func TestViolationWritesVisualization(t *testing.T) {
	viz := filepath.Join(t.TempDir(), "viz.html")
	stale := History{Ops: []Op{put(0, "a", 0, 10), put(0, "b", 20, 30), get(1, "a", 40, 50)}}
	r := Check(stale, 10*time.Second, viz)
	if r.Ok || r.VizPath != viz || r.VizErr != "" {
		t.Fatalf("got %s", r)
	}
	b, err := os.ReadFile(viz)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<html") || !strings.Contains(string(b), `get(k) -\u003e \"a\"`) {
		t.Fatalf("visualization does not show the history:\n%.500s", b)
	}

	okViz := filepath.Join(t.TempDir(), "ok.html")
	if r := Check(History{Ops: stale.Ops[:2]}, 10*time.Second, okViz); !r.Ok || r.VizPath != "" {
		t.Fatalf("got %s", r)
	}
	if _, err := os.Stat(okViz); !os.IsNotExist(err) {
		t.Fatalf("a linearizable history wrote a visualization: %v", err)
	}
}
