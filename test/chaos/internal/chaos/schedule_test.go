package chaos

import (
	"slices"
	"testing"
	"time"
)

func draw(t *testing.T, seed uint64, mode Mode, n int, avail func(Kind) bool) []Episode {
	t.Helper()
	s, err := NewSchedule(seed, mode, 3, avail)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Episode, n)
	for i := range out {
		out[i] = s.Next()
	}
	return out
}

func TestSameSeedDrawsTheSameSchedule(t *testing.T) {
	a, b := draw(t, 42, Minority, 200, nil), draw(t, 42, Minority, 200, nil)
	for i := range a {
		if a[i].String() != b[i].String() {
			t.Fatalf("episode %d differs for one seed: %s vs %s", i, a[i], b[i])
		}
	}
	c := draw(t, 43, Minority, 200, nil)
	same := 0
	for i := range a {
		if a[i].String() == c[i].String() {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("seeds 42 and 43 drew the same schedule")
	}
}

func TestMinorityScheduleDrawsEveryFaultOfTheCatalog(t *testing.T) {
	seen := map[Kind]int{}
	for _, e := range draw(t, 7, Minority, 400, nil) {
		seen[e.Kind]++
		if x := e.Extra; x != nil {
			seen[x.Kind]++
			if !catalog[e.Kind].healing {
				t.Errorf("%s: an extra on a fault that starts no heal", e)
			}
		}
		if catalog[e.Kind].majority {
			t.Errorf("%s: a majority fault in minority mode", e)
		}
		if e.Slot < 0 || e.Slot > 2 {
			t.Errorf("%s: slot out of range", e)
		}
	}
	for _, k := range Kinds() {
		if !catalog[k].majority && seen[k] == 0 {
			t.Errorf("%s never drawn in 400 episodes: %v", k, seen)
		}
	}
	if seen[LoseNode] > MaxNodeLosses {
		t.Errorf("lose-node drawn %d times, at most %d per run", seen[LoseNode], MaxNodeLosses)
	}
}

func TestMajorityScheduleTakesTwoDistinctMembers(t *testing.T) {
	for _, e := range draw(t, 9, Majority, 100, nil) {
		if !catalog[e.Kind].majority {
			t.Errorf("%s: not a majority fault", e)
		}
		if e.Second == e.Slot {
			t.Errorf("%s: both faults on one slot", e)
		}
		if e.Hold <= 0 {
			t.Errorf("%s: a majority fault without a hold", e)
		}
	}
}

// A machine that cannot make a fault draws the same schedule (the runner
// skips that fault), so a seed replays the same everywhere.
func TestAMachineWithoutAFaultDrawsTheSameSchedule(t *testing.T) {
	noDisk := func(k Kind) bool { return catalog[k].needs != diskLimit }
	a, b := draw(t, 11, Minority, 300, noDisk), draw(t, 11, Minority, 300, nil)
	for i := range a {
		if a[i].String() != b[i].String() {
			t.Fatalf("episode %d: %s without disk faults, %s with", i, a[i], b[i])
		}
	}
}

func TestAPIStopsFallEitherSideOfTheLeaseTTL(t *testing.T) {
	var short, long int
	for _, e := range draw(t, 5, Minority, 600, nil) {
		if e.Extra == nil {
			continue
		}
		switch x := e.Extra; x.Kind {
		case APIStopShort:
			short++
			if x.Hold >= leaseTTL {
				t.Errorf("%s: a short API stop of %s ≥ the Lease TTL %s", e, x.Hold, leaseTTL)
			}
		case APIStopLong:
			long++
			if x.Hold <= leaseTTL {
				t.Errorf("%s: a long API stop of %s ≤ the Lease TTL %s", e, x.Hold, leaseTTL)
			}
		}
		if e.Extra.After < 0 || e.Extra.After >= 25*time.Second {
			t.Errorf("%s: extra outside the first 25 s of the heal", e)
		}
	}
	if short == 0 || long == 0 {
		t.Fatalf("short %d, long %d API stops in 600 episodes", short, long)
	}
}

func TestBadScheduleInputIsRefused(t *testing.T) {
	if _, err := NewSchedule(1, Minority, 1, nil); err == nil {
		t.Error("a one-member cluster accepted")
	}
	if _, err := NewSchedule(1, "sideways", 3, nil); err == nil {
		t.Error("an unknown mode accepted")
	}
	if _, err := NewSchedule(1, Minority, 3, func(Kind) bool { return false }); err == nil {
		t.Error("a catalog with nothing available accepted")
	}
	if !slices.IsSorted(Kinds()) {
		t.Error("the catalog order is not fixed")
	}
}

// A fault that must leave every member's ID must also end before the
// agent's grace period does; pause-hung must outlast it.
func TestHoldsAreEitherSideOfTheGracePeriod(t *testing.T) {
	for _, k := range Kinds() {
		f := catalog[k]
		switch {
		case f.extraOnly || f.majority || f.healing:
		case f.mayRejoin && f.hold.min <= gracePeriod:
			t.Errorf("%s may rejoin but can end (%s) within the grace period %s", k, f.hold.min, gracePeriod)
		case !f.mayRejoin && f.hold.max >= gracePeriod:
			t.Errorf("%s must not rejoin but can last (%s) past the grace period %s", k, f.hold.max, gracePeriod)
		}
	}
}
