package memberstate

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)

const grace = 30 * time.Second

// sample is a healthy member of a healthy 3-voter cluster, changed by opts.
func sample(at time.Duration, opts ...func(*Sample)) Sample {
	s := Sample{
		At: t0.Add(at), Serving: true, DataDir: "ok", HealthyVoters: 3, Voters: 3,
		HasLeader: true, InMemberList: true,
	}
	for _, o := range opts {
		o(&s)
	}
	return s
}

func notServing(s *Sample)           { s.Serving = false }
func learner(s *Sample)              { s.IsLearner = true }
func notMember(s *Sample)            { s.InMemberList = false }
func dataDir(c string) func(*Sample) { return func(s *Sample) { s.DataDir = c } }

// deepDir is a class the watchdog's deep check confirmed.
func deepDir(c string) func(*Sample) {
	return func(s *Sample) { s.DataDir, s.DataDirVerified = c, true }
}
func alarms(a ...string) func(*Sample) {
	return func(s *Sample) { s.Alarms = a }
}

// step is one observation and the verdict expected after it. since is the
// offset of TroubleSince from t0, or -1 when it must be zero.
type step struct {
	s      Sample
	state  State
	reason string
	since  time.Duration
}

const noTrouble = time.Duration(-1)

func run(t *testing.T, cfg Config, steps []step) {
	t.Helper()
	var tr Tracker
	for i, st := range steps {
		v := tr.Observe(st.s, cfg)
		wantSince := time.Time{}
		if st.since != noTrouble {
			wantSince = t0.Add(st.since)
		}
		if v.State != st.state || v.Reason != st.reason || !v.TroubleSince.Equal(wantSince) {
			t.Errorf("step %d (at +%s): got %s/%s since %s; want %s/%s since %s\n  detail: %s",
				i, st.s.At.Sub(t0), v.State, v.Reason, fmtSince(v.TroubleSince), st.state, st.reason, fmtSince(wantSince), v.Detail)
		}
	}
}

func fmtSince(ts time.Time) string {
	if ts.IsZero() {
		return "never"
	}
	return "+" + ts.Sub(t0).String()
}

func TestStateTransitions(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "healthy member stays healthy",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0), Healthy, "healthy", noTrouble},
				{sample(time.Hour), Healthy, "healthy", noTrouble},
			},
		},
		{
			name: "in-use data dir counts as ok",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, dataDir("in-use")), Healthy, "healthy", noTrouble},
			},
		},
		{
			name: "down becomes lost once the grace period is over",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0), Healthy, "healthy", noTrouble},
				{sample(10*time.Second, notServing), Down, "not-serving", 10 * time.Second},
				{sample(39*time.Second, notServing), Down, "not-serving", 10 * time.Second},
				{sample(40*time.Second, notServing), Lost, "not-serving", 10 * time.Second},
				{sample(50*time.Second, notServing), Lost, "not-serving", 10 * time.Second},
			},
		},
		{
			name: "lost member that serves healthy again is healthy",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notServing), Down, "not-serving", 0},
				{sample(time.Minute, notServing), Lost, "not-serving", 0},
				{sample(61 * time.Second), Healthy, "healthy", noTrouble},
				{sample(62*time.Second, notServing), Down, "not-serving", 62 * time.Second},
			},
		},
		{
			name: "member restarted within the grace period never becomes lost",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notServing), Down, "not-serving", 0},
				{sample(20*time.Second, notServing), Down, "not-serving", 0},
				{sample(25 * time.Second), Healthy, "healthy", noTrouble},
				{sample(30*time.Second, notServing), Down, "not-serving", 30 * time.Second},
				{sample(55*time.Second, notServing), Down, "not-serving", 30 * time.Second},
				{sample(56 * time.Second), Healthy, "healthy", noTrouble},
			},
		},
		{
			name: "data dir gone while not serving is lost at once",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0), Healthy, "healthy", noTrouble},
				{sample(time.Second, notServing, dataDir("missing")), Lost, "data-dir-missing", time.Second},
			},
		},
		{
			name: "empty, and confirmed corrupt and foreign data dirs while not serving are lost at once",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notServing, dataDir("empty")), Lost, "data-dir-empty", 0},
				{sample(time.Second), Healthy, "healthy", noTrouble},
				{sample(2*time.Second, notServing, deepDir("corrupt")), Lost, "data-dir-corrupt", 2 * time.Second},
				{sample(3 * time.Second), Healthy, "healthy", noTrouble},
				{sample(4*time.Second, notServing, deepDir("foreign")), Lost, "data-dir-foreign", 4 * time.Second},
				{sample(5 * time.Second), Healthy, "healthy", noTrouble},
				// A restored volume (UC2): behind the member's high-water mark.
				{sample(6*time.Second, notServing, deepDir("stale")), Lost, "data-dir-stale", 6 * time.Second},
			},
		},
		{
			// Issue 38: a file in place of the data dir is proof by the layout
			// check alone (no bootstrap window makes the path a file); serving,
			// it is degraded like a wiped one, the grace period applies.
			name: "a data dir that is not a directory is lost at once when not serving, unconfirmed too",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, dataDir("not-a-directory")), Degraded, "data-dir-not-a-directory", 0},
				{sample(time.Second, notServing, dataDir("not-a-directory")), Lost, "data-dir-not-a-directory", 0},
			},
		},
		{
			// The layout check's corrupt can be a member bootstrapping (db
			// before WAL): without the deep check's word the grace applies.
			name: "corrupt or foreign data dirs the deep check did not confirm wait out the grace",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notServing, dataDir("corrupt")), Down, "data-dir-corrupt", 0},
				{sample(10*time.Second, notServing, dataDir("foreign")), Down, "data-dir-foreign", 0},
				{sample(20*time.Second, notServing, dataDir("corrupt")), Down, "data-dir-corrupt", 0},
				{sample(30*time.Second, notServing, dataDir("corrupt")), Lost, "data-dir-corrupt", 0},
				{sample(31 * time.Second), Healthy, "healthy", noTrouble},
				{sample(32*time.Second, notServing, dataDir("corrupt")), Down, "data-dir-corrupt", 32 * time.Second},
				{sample(33*time.Second, notServing, deepDir("corrupt")), Lost, "data-dir-corrupt", 32 * time.Second},
			},
		},
		{
			name: "data dir wiped under a serving member is degraded, then lost after grace",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0), Healthy, "healthy", noTrouble},
				{sample(time.Second, dataDir("missing")), Degraded, "data-dir-missing", time.Second},
				{sample(30*time.Second, dataDir("missing")), Degraded, "data-dir-missing", time.Second},
				{sample(31*time.Second, dataDir("missing")), Lost, "data-dir-missing", time.Second},
			},
		},
		{
			name: "wiped member that then stops is lost at once, run kept",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, dataDir("empty")), Degraded, "data-dir-empty", 0},
				{sample(5*time.Second, dataDir("empty"), notServing), Lost, "data-dir-empty", 0},
			},
		},
		{
			name: "lost at once lasts only while its condition holds",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notServing, dataDir("missing")), Lost, "data-dir-missing", 0},
				// data dir back (e.g. a transient classification) but still
				// down: grace applies again, measured from the run's start.
				{sample(5*time.Second, notServing), Down, "not-serving", 0},
				{sample(30*time.Second, notServing), Lost, "not-serving", 0},
			},
		},
		{
			name: "alarm makes a serving member degraded, then lost after grace",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, alarms("NOSPACE")), Degraded, "alarm:NOSPACE", 0},
				{sample(29*time.Second, alarms("NOSPACE", "CORRUPT")), Degraded, "alarm:CORRUPT", 0},
				{sample(30*time.Second, alarms("NOSPACE")), Lost, "alarm:NOSPACE", 0},
				{sample(31 * time.Second), Healthy, "healthy", noTrouble},
			},
		},
		{
			name: "learner is its own state and never ages into lost",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, learner), Learner, "learner", noTrouble},
				{sample(time.Hour, learner), Learner, "learner", noTrouble},
			},
		},
		{
			name: "learner ends an unhealthy run",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notServing), Down, "not-serving", 0},
				{sample(20*time.Second, learner), Learner, "learner", noTrouble},
				{sample(40*time.Second, notServing), Down, "not-serving", 40 * time.Second},
			},
		},
		{
			name: "learner promoted to voter becomes healthy",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, learner), Learner, "learner", noTrouble},
				{sample(time.Second), Healthy, "healthy", noTrouble},
			},
		},
		{
			name: "learner that stops serving is down, then lost after grace",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, learner), Learner, "learner", noTrouble},
				{sample(time.Second, learner, notServing), Down, "not-serving", time.Second},
				{sample(31*time.Second, learner, notServing), Lost, "not-serving", time.Second},
			},
		},
		{
			name: "learner with a wiped data dir is degraded",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, learner, dataDir("corrupt")), Degraded, "data-dir-corrupt", 0},
				{sample(time.Second, learner, deepDir("corrupt"), notServing), Lost, "data-dir-corrupt", 0},
			},
		},
		{
			name: "learner with an alarm is degraded",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, learner, alarms("NOSPACE")), Degraded, "alarm:NOSPACE", 0},
			},
		},
		{
			name: "serving member outside the member list is degraded, subject to grace",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notMember), Degraded, "not-a-member", 0},
				{sample(29*time.Second, notMember), Degraded, "not-a-member", 0},
				{sample(30*time.Second, notMember), Lost, "not-a-member", 0},
			},
		},
		{
			name: "stopped member outside the member list is down, subject to grace",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notMember, notServing), Down, "not-a-member", 0},
				{sample(30*time.Second, notMember, notServing), Lost, "not-a-member", 0},
			},
		},
		{
			name: "a gone data dir outranks not being a member",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notMember, notServing, dataDir("missing")), Lost, "data-dir-missing", 0},
			},
		},
		{
			name: "unknown data dir class is trouble subject to grace, never lost at once",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, dataDir("")), Degraded, "data-dir-unknown", 0},
				{sample(time.Second, dataDir("weird"), notServing), Down, "not-serving", 0},
				{sample(30*time.Second, dataDir("weird"), notServing), Lost, "not-serving", 0},
			},
		},
		{
			name: "changing causes keep one continuous run",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notServing), Down, "not-serving", 0},
				{sample(10*time.Second, alarms("NOSPACE")), Degraded, "alarm:NOSPACE", 0},
				{sample(20*time.Second, notMember), Degraded, "not-a-member", 0},
				{sample(30*time.Second, notServing), Lost, "not-serving", 0},
			},
		},
		{
			name: "zero grace still needs two unhealthy samples",
			cfg:  Config{},
			steps: []step{
				{sample(0, notServing), Down, "not-serving", 0},
				{sample(0, notServing), Lost, "not-serving", 0},
			},
		},
		{
			name: "negative grace acts as zero",
			cfg:  Config{GracePeriod: -time.Minute},
			steps: []step{
				{sample(0, notServing), Down, "not-serving", 0},
				{sample(time.Second, notServing), Lost, "not-serving", 0},
			},
		},
		{
			name: "a gap in observation restarts the run",
			cfg:  Config{GracePeriod: grace, MaxSampleGap: 5 * time.Second},
			steps: []step{
				{sample(0, notServing), Down, "not-serving", 0},
				{sample(5*time.Second, notServing), Down, "not-serving", 0},
				{sample(time.Minute, notServing), Down, "not-serving", time.Minute},
				{sample(time.Minute+5*time.Second, notServing), Down, "not-serving", time.Minute},
			},
		},
		{
			name: "without a gap limit the run spans sparse samples",
			cfg:  Config{GracePeriod: grace},
			steps: []step{
				{sample(0, notServing), Down, "not-serving", 0},
				{sample(time.Minute, notServing), Lost, "not-serving", 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { run(t, tt.cfg, tt.steps) })
	}
}

func TestNeverLostWithinGracePeriod(t *testing.T) {
	cfg := Config{GracePeriod: grace}
	for _, bad := range []func(*Sample){notServing, notMember, alarms("NOSPACE"), dataDir("missing"), dataDir("")} {
		var tr Tracker
		for at := time.Duration(0); at < grace; at += time.Second {
			if v := tr.Observe(sample(at, bad), cfg); v.State == Lost {
				t.Fatalf("lost at +%s (%s), within the %s grace period", at, v.Reason, grace)
			} else if !v.InGracePeriod() {
				t.Fatalf("at +%s: InGracePeriod false for %s/%s", at, v.State, v.Reason)
			}
		}
	}
}

func TestSingleBadObservationNeverLost(t *testing.T) {
	for _, cfg := range []Config{{}, {GracePeriod: grace}} {
		var tr Tracker
		tr.Observe(sample(0), cfg)
		v := tr.Observe(sample(time.Hour, notServing), cfg)
		if v.State == Lost {
			t.Errorf("grace %s: one bad sample after a healthy one made the member lost", cfg.GracePeriod)
		}
		if v := tr.Observe(sample(2*time.Hour), cfg); v.State != Healthy {
			t.Errorf("grace %s: got %s after recovering", cfg.GracePeriod, v.State)
		}
	}
}

func TestClockGoingBackwardsNeverProducesLost(t *testing.T) {
	cfg := Config{GracePeriod: grace}
	run(t, cfg, []step{
		{sample(0, notServing), Down, "not-serving", 0},
		{sample(20*time.Second, notServing), Down, "not-serving", 0},
		// The clock steps back an hour: the run restarts at the new time
		// instead of measuring across the jump.
		{sample(-time.Hour, notServing), Down, "not-serving", -time.Hour},
		{sample(-time.Hour+29*time.Second, notServing), Down, "not-serving", -time.Hour},
		// Forward again past the old timestamps, still within grace of the restart.
		{sample(-time.Hour+29*time.Second+500*time.Millisecond, notServing), Down, "not-serving", -time.Hour},
		{sample(-time.Hour+30*time.Second, notServing), Lost, "not-serving", -time.Hour},
	})
}

func TestClockJitterBackwardsRestartsTheRun(t *testing.T) {
	cfg := Config{GracePeriod: grace}
	run(t, cfg, []step{
		{sample(0, notServing), Down, "not-serving", 0},
		{sample(29*time.Second, notServing), Down, "not-serving", 0},
		{sample(28*time.Second, notServing), Down, "not-serving", 28 * time.Second},
		{sample(50*time.Second, notServing), Down, "not-serving", 28 * time.Second},
		{sample(58*time.Second, notServing), Lost, "not-serving", 28 * time.Second},
	})
}

func TestClockGoingBackwardsKeepsTheAtOnceRule(t *testing.T) {
	run(t, Config{GracePeriod: grace}, []step{
		{sample(0), Healthy, "healthy", noTrouble},
		{sample(-time.Minute, notServing, dataDir("missing")), Lost, "data-dir-missing", -time.Minute},
	})
}

func TestMajorityLostIsIndependentOfLocalState(t *testing.T) {
	tests := []struct {
		name    string
		healthy int
		voters  int
		leader  bool
		local   []func(*Sample)
		want    bool
	}{
		{name: "3 of 3 healthy", healthy: 3, voters: 3, leader: true, want: false},
		{name: "2 of 3 healthy, local down", healthy: 2, voters: 3, leader: true, local: []func(*Sample){notServing}, want: false},
		{name: "1 of 3 healthy, local healthy", healthy: 1, voters: 3, leader: true, want: true},
		{name: "3 of 3 healthy but no leader", healthy: 3, voters: 3, leader: false, want: true},
		{name: "3 of 5 healthy", healthy: 3, voters: 5, leader: true, want: false},
		{name: "2 of 5 healthy, local lost", healthy: 2, voters: 5, leader: true, local: []func(*Sample){notServing, dataDir("missing")}, want: true},
		{name: "1 of 1 healthy", healthy: 1, voters: 1, leader: true, want: false},
		{name: "member list unknown", healthy: 0, voters: 0, leader: true, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr Tracker
			s := sample(0, tt.local...)
			s.HealthyVoters, s.Voters, s.HasLeader = tt.healthy, tt.voters, tt.leader
			alone := sample(0, tt.local...)
			want := new(Tracker).Observe(alone, Config{GracePeriod: grace})
			v := tr.Observe(s, Config{GracePeriod: grace})
			if v.MajorityLost != tt.want {
				t.Errorf("MajorityLost = %v, want %v", v.MajorityLost, tt.want)
			}
			if v.State != want.State || v.Reason != want.Reason {
				t.Errorf("cluster health changed the local state: %s/%s, want %s/%s", v.State, v.Reason, want.State, want.Reason)
			}
		})
	}
}

func TestQuorum(t *testing.T) {
	want := map[int]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4}
	for n := 0; n <= 7; n++ {
		if got := Quorum(n); got != want[n] {
			t.Errorf("Quorum(%d) = %d, want %d", n, got, want[n])
		}
	}
	if got := Quorum(-1); got != 1 {
		t.Errorf("Quorum(-1) = %d, want 1", got)
	}
}

func TestAllStatesHasStableMetricOrder(t *testing.T) {
	want := []State{"healthy", "degraded", "down", "lost", "recovering", "learner"}
	if got := AllStates(); !reflect.DeepEqual(got, want) {
		t.Errorf("AllStates() = %v, want %v", got, want)
	}
}

func TestTrackerNeverProducesRecovering(t *testing.T) {
	var tr Tracker
	mods := []func(*Sample){notServing, learner, notMember, alarms("NOSPACE"), dataDir("missing"), dataDir("")}
	for i := 0; i < 1<<len(mods); i++ {
		var opts []func(*Sample)
		for j, m := range mods {
			if i&(1<<j) != 0 {
				opts = append(opts, m)
			}
		}
		v := tr.Observe(sample(time.Duration(i)*time.Second, opts...), Config{GracePeriod: grace})
		if v.State == Recovering {
			t.Fatalf("combination %b produced %s", i, v.State)
		}
		if (v.State == Healthy || v.State == Learner) != v.TroubleSince.IsZero() {
			t.Fatalf("combination %b: state %s with TroubleSince %v", i, v.State, v.TroubleSince)
		}
	}
}

func TestDetailExplainsEveryProblemAndTheGrace(t *testing.T) {
	var tr Tracker
	cfg := Config{GracePeriod: grace}
	v := tr.Observe(sample(0, dataDir("missing"), alarms("NOSPACE")), cfg)
	for _, want := range []string{"data dir is missing", "alarms active: NOSPACE", "cannot survive a restart", fmt.Sprintf("of the %s grace period", grace)} {
		if !strings.Contains(v.Detail, want) {
			t.Errorf("detail %q does not mention %q", v.Detail, want)
		}
	}
	v = tr.Observe(sample(time.Second, dataDir("missing"), notServing), cfg)
	if !strings.Contains(v.Detail, "lost at once") {
		t.Errorf("detail %q does not say why it is lost without grace", v.Detail)
	}
}
