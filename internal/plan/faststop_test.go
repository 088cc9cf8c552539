package plan

import (
	"testing"
	"time"
)

// The stop watch ends etcd early only with nothing to lose; one row per
// refusal.
func TestFastStopEndsEtcdOnlyWithNothingToLose(t *testing.T) {
	ready := FastStopFacts{Served: true, Drained: true, ClientRefused: true, QuietFor: FastStopQuiet}
	for _, tc := range []struct {
		name string
		f    FastStopFacts
		kill bool
		want Reason
	}{
		{"shutting down, no db, follower, nothing in flight: now", ready, true, FastStopNow},
		{"a starting etcd (never served) is never ended", FastStopFacts{Drained: true, ClientRefused: true}, false, FastStopNotServed},
		{"serving: its connection is open", FastStopFacts{Served: true, ClientRefused: true}, false, FastStopServing},
		{"its connection closed but the client URL still accepts (a lost connection, not a stop)", FastStopFacts{Served: true, Drained: true}, false, FastStopServing},
		{"a db on disk: etcd's own stop flushes it", with(ready, func(f *FastStopFacts) { f.DBOnDisk = true }), false, FastStopDataOnDisk},
		{"no metrics: requests in flight unknown", with(ready, func(f *FastStopFacts) { f.MetricsError = "connection refused" }), false, FastStopNoMetrics},
		{"the leader hands off in its own stop", with(ready, func(f *FastStopFacts) { f.IsLeader = true }), false, FastStopLeader},
		{"a request in flight gets its answer first", with(ready, func(f *FastStopFacts) { f.UnaryInFlight = 1 }), false, FastStopRequestsInFlow},
		{"counts not yet quiet for long enough (an answer may still be on its way)", with(ready, func(f *FastStopFacts) { f.QuietFor = FastStopQuiet - time.Millisecond }), false, FastStopRequestsInFlow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kill, why, detail := DecideFastStop(tc.f)
			if kill != tc.kill || why != tc.want || detail == "" {
				t.Fatalf("DecideFastStop(%+v) = %v, %s (%q); want %v, %s", tc.f, kill, why, detail, tc.kill, tc.want)
			}
		})
	}
}

func with(f FastStopFacts, change func(*FastStopFacts)) FastStopFacts {
	change(&f)
	return f
}
