package plan

// Test fixtures: a readable way to say "a cluster of n voters, k of them
// healthy, the local member lost, a journal in phase p, the Lease held",
// so that the tables below read like the design's rules.

import (
	"fmt"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

const (
	localName   = "node1"
	localPeer   = "https://10.0.0.1:2380"
	leaderIndex = 100_000
	mib         = 1 << 20
)

// t0 is the fixtures' "now".
var t0 = time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)

// id is member i's ID: voters are 1..8 (member 1 is the local member),
// extras 10 and up (18 is "our" new learner, 19 some other learner).
func id(i int) uint64 { return 0xa000 + uint64(i) }

func peer(i int) string { return fmt.Sprintf("https://10.0.0.%d:2380", i) }

// localKind is the local member's condition.
type localKind int

const (
	localLost    localKind = iota // in the list, not serving, data dir missing (the default)
	localHealthy                  // serving, data dir ok
	localWiped                    // serving from open files, data dir gone
	localDown                     // not serving, data dir ok (restarting, in grace)
	localGone                     // not in the member list (removed, or a new node)
)

type spec struct {
	n, healthy   int
	local        localKind
	dataDir      string
	verdict      memberstate.State
	verdictSince time.Time // the verdict's TroubleSince (zero: none)
	match        observation.Match
	extra        []observation.Member
	noLeader     bool
	listErr      string
	dbSize       int64
	in           Input
	cfg          Config
	// post edits the built members (their versions, say).
	post []func(*observation.Observation)
}

type opt func(*spec)

func defaultConfig() Config {
	return Config{AutoHeal: true, MaxLearnerLag: 1000, LearnerStallTimeout: 5 * time.Minute,
		RetryBackoff: time.Minute, MaxRetryBackoff: 8 * time.Minute}
}

// cluster builds the input for n voters of which `healthy` are healthy
// (serving; for the local member also with a usable data dir). The local
// member is member 1 and, unless an option says otherwise, lost: in the
// list, not serving, data dir missing, verdict Lost. With localGone, the n
// voters are all peers. The Kubernetes API answers and the Lease is free.
func cluster(n, healthy int, opts ...opt) (Input, Config) {
	s := spec{n: n, healthy: healthy, dbSize: 64 * mib,
		in:  Input{Now: t0, APIAvailable: true, FreeBytes: 1 << 40},
		cfg: defaultConfig()}
	for _, o := range opts {
		o(&s)
	}
	return s.build(), s.cfg
}

func (s *spec) build() Input {
	in := s.in
	localIn := s.local != localGone
	localServes := s.local == localHealthy || s.local == localWiped
	peers, first := s.n-1, 2
	if !localIn {
		peers = s.n
	}
	servingPeers := s.healthy
	if s.local == localHealthy {
		servingPeers--
	}
	if servingPeers < 0 || servingPeers > peers {
		panic(fmt.Sprintf("cluster(%d, %d) with local kind %d: impossible", s.n, s.healthy, s.local))
	}
	var ms []observation.Member
	voter := func(i int, serving bool) observation.Member {
		return observation.Member{ID: id(i), Name: fmt.Sprintf("node%d", i), PeerURLs: []string{peer(i)},
			ClientURLs: []string{fmt.Sprintf("https://10.0.0.%d:2379", i)}, Serving: serving,
			RaftIndex: leaderIndex, AppliedIndex: leaderIndex, DBSize: s.dbSize}
	}
	if localIn {
		ms = append(ms, voter(1, localServes))
	}
	for i := range peers {
		ms = append(ms, voter(first+i, i < servingPeers))
	}
	if !s.noLeader {
		for i := range ms {
			if ms[i].Serving && (ms[i].ID != id(1) || servingPeers == 0) {
				ms[i].IsLeader, in.Obs.LeaderID = true, ms[i].ID
				break
			}
		}
	}
	ms = append(ms, s.extra...)
	in.Obs.At, in.Obs.ClusterID, in.Obs.Members, in.Obs.MemberListError = in.Now, 0xc1, ms, s.listErr
	for _, f := range s.post {
		f(&in.Obs)
	}

	class := map[localKind]string{localLost: "missing", localHealthy: "ok", localWiped: "empty", localDown: "ok", localGone: "empty"}[s.local]
	if s.dataDir != "" {
		class = s.dataDir
	}
	in.Obs.Local = observation.Local{Name: localName, PeerURLs: []string{localPeer}, DataDir: "/var/lib/etcd",
		DataDirClass: class, Serving: localServes}
	matchLocal(&in.Obs)
	if s.match != "" {
		in.Obs.Local.Match, in.Obs.Local.ID, in.Obs.Local.MatchDetail = s.match, 0, "forced "+string(s.match)
	}
	verdict := map[localKind]memberstate.State{localLost: memberstate.Lost, localHealthy: memberstate.Healthy,
		localWiped: memberstate.Degraded, localDown: memberstate.Down, localGone: memberstate.Lost}[s.local]
	if s.verdict != "" {
		verdict = s.verdict
	}
	in.Verdict = memberstate.Verdict{State: verdict, Reason: string(verdict), Detail: "verdict " + string(verdict), TroubleSince: s.verdictSince}
	return in
}

// matchLocal matches the local member the way the watchdog does
// (observation.MatchLocal) and copies its serving state, as the watchdog does.
func matchLocal(o *observation.Observation) {
	observation.MatchLocal(o)
	if l := &o.Local; l.Match == observation.MatchOK {
		m, _ := o.Member(l.ID)
		l.Serving, l.IsLearner = m.Serving, m.IsLearner
	}
}

// --- the local member and the cluster ---

func local(k localKind) opt                 { return func(s *spec) { s.local = k } }
func dataDir(class string) opt              { return func(s *spec) { s.dataDir = class } }
func verdict(st memberstate.State) opt      { return func(s *spec) { s.verdict = st } }
func forceMatch(m observation.Match) opt    { return func(s *spec) { s.match = m } }
func noLeader() opt                         { return func(s *spec) { s.noLeader = true } }
func listError() opt                        { return func(s *spec) { s.listErr = "context deadline exceeded" } }
func dbSize(b int64) opt                    { return func(s *spec) { s.dbSize = b } }
func member(m observation.Member) opt       { return func(s *spec) { s.extra = append(s.extra, m) } }
func learnerOf(i int, name, url string) opt { return member(learner(i, name, url, true, leaderIndex)) }
func otherLearner() opt                     { return learnerOf(19, "node19", peer(19)) }
func ourLearner(serving bool, applied uint64) opt {
	return member(learner(18, localName, localPeer, serving, applied))
}

// unstartedLearner is what an add that timed out but was applied leaves:
// a learner with our peer URL and no name yet.
func unstartedLearner(i int) opt { return member(learner(i, "", localPeer, false, 0)) }

func learner(i int, name, url string, serving bool, applied uint64) observation.Member {
	return observation.Member{ID: id(i), Name: name, PeerURLs: []string{url}, IsLearner: true,
		Serving: serving, AppliedIndex: applied}
}

// ourVoter is a serving voter with our name and peer URL (not counted in n).
func ourVoter(i int) opt {
	return member(observation.Member{ID: id(i), Name: localName, PeerURLs: []string{localPeer}, Serving: true,
		RaftIndex: leaderIndex, AppliedIndex: leaderIndex})
}

// --- the request, the journal, the Lease, the disk, the clock ---

func request() opt { return func(s *spec) { s.in.Request = &Request{Action: "rejoin"} } }
func dryRunRequest() opt {
	return func(s *spec) { s.in.Request = &Request{Action: "rejoin", DryRun: true} }
}
func badRequest(a string) opt {
	return func(s *spec) { s.in.Request = &Request{Action: a} }
}
func noAPI() opt              { return func(s *spec) { s.in.APIAvailable, s.in.LeaseHeld = false, false } }
func leaseHeld() opt          { return func(s *spec) { s.in.LeaseHeld = true } }
func leaseOther(h string) opt { return func(s *spec) { s.in.LeaseHolder = h } }
func free(b uint64) opt       { return func(s *spec) { s.in.FreeBytes = b } }
func at(t time.Time) opt      { return func(s *spec) { s.in.Now = t } }
func cfg(f func(*Config)) opt { return func(s *spec) { f(&s.cfg) } }

// journalAt opens a journal in phase p for the local member (old ID = member 1).
func journalAt(p record.Phase, mods ...func(*record.Record)) opt {
	return func(s *spec) {
		s.in.Journal = record.Record{ID: "r1", Member: localName, Request: "auto", Phase: p,
			StartedAt: t0.Add(-10 * time.Minute), OldMemberID: record.MemberID(id(1)), PeerURLs: []string{localPeer}}
		for _, m := range mods {
			m(&s.in.Journal)
		}
	}
}

func newID(i int) func(*record.Record) {
	return func(r *record.Record) { r.NewMemberID = record.MemberID(id(i)) }
}
func oldID(v uint64) func(*record.Record) {
	return func(r *record.Record) { r.OldMemberID = record.MemberID(v) }
}
func progressAt(t time.Time) func(*record.Record) {
	return func(r *record.Record) { r.LearnerProgressAt = t }
}

// failed is a closed journal of a failed attempt: failures in a row, the last at last.
func failed(failures int, last time.Time) opt {
	return func(s *spec) {
		s.in.Journal = record.Record{ID: "r0", Member: localName, Request: "auto", Phase: record.PhaseDone,
			Result: record.ResultFailed, Reason: "learner-stalled", Failures: failures, LastFailureAt: last}
	}
}

// want checks a decision's action and reason, and that refusals and waits explain themselves.
func want(t *testing.T, d Decision, a Action, r Reason) {
	t.Helper()
	if d.Action != a || d.Reason != r {
		t.Fatalf("Decide = %s/%q (%s), want %s/%q", d.Action, d.Reason, d.Detail, a, r)
	}
	if (d.Action == Refuse || d.Reason != ReasonNone) && d.Detail == "" {
		t.Fatalf("Decide = %s/%q without a detail", d.Action, d.Reason)
	}
}

func q(n int) int { return memberstate.Quorum(n) }

// forN runs f for each cluster size in [lo, hi] as a subtest.
func forN(t *testing.T, lo, hi int, f func(t *testing.T, n int)) {
	for n := lo; n <= hi; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) { f(t, n) })
	}
}
