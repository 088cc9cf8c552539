package plan

// A property test: random inputs over clusters of 1..7 voters (serving,
// healthy, learners, leader, journal phase, request, Lease, disk) and the
// safety rules as invariants that must hold for every decision.

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-agent/etcd-agent/internal/memberstate"
	"github.com/etcd-agent/etcd-agent/internal/observation"
	"github.com/etcd-agent/etcd-agent/internal/record"
)

const propertyRuns = 20_000

var allPhases = []record.Phase{record.PhaseNone, record.PhaseStarted, record.PhaseStopped, record.PhaseSnapshotted,
	record.PhaseRemoved, record.PhaseLearnerAdded, record.PhasePrepared, record.PhaseMemberStarted,
	record.PhasePromoted, record.PhaseVerified, record.PhaseDone}

func TestDecideInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(20260301, 7))
	actions := map[Action]int{}
	reasons := map[Reason]int{}
	failures := 0
	for i := range propertyRuns {
		in, c := randomInput(r)
		before := cloneInput(in)
		d := Decide(in, c)
		actions[d.Action]++
		reasons[d.Reason]++
		errs := invariants(in, c, d)
		if !reflect.DeepEqual(in, before) {
			errs = append(errs, "Decide changed its input")
		}
		if again := Decide(in, c); again != d {
			errs = append(errs, fmt.Sprintf("not deterministic: %+v then %+v", d, again))
		}
		if len(errs) > 0 {
			failures++
			if failures <= 5 {
				t.Errorf("run %d: %s/%q (%s) breaks:\n  %s\ninput: %s", i, d.Action, d.Reason, d.Detail,
					strings.Join(errs, "\n  "), describe(in, c))
			}
		}
	}
	if failures > 5 {
		t.Errorf("... and %d more failing runs", failures-5)
	}
	// The generator must reach every action and every reason Decide gives,
	// or the invariants above prove little.
	for _, a := range []Action{Nothing, Refuse, Begin, StopMember, TakeSnapshot, RemoveMember, AddLearner, AdoptLearner,
		PrepareDataDir, StartMember, WaitCatchUp, Promote, RemoveStalledLearner, Verify, Finish,
		RollbackLearner, RemoveStrandedLearner, RestoreClientURLs, BeginRestoreClientURLs} {
		if actions[a] == 0 {
			t.Errorf("no random input led to %s", a)
		}
	}
	for _, rs := range []Reason{ReasonNone, ReasonMajorityLost, ReasonWouldLoseQuorum, ReasonLearnerPresent,
		ReasonLeaseHeldByOther, ReasonAPIUnavailable, ReasonAmbiguousIdentity, ReasonInGracePeriod,
		ReasonMemberHealthy, ReasonDryRun, ReasonDiskFull, ReasonBadRequest, ReasonBackoff,
		ReasonNoSnapshotSource, ReasonLearnerStalled, ReasonLearnerGone, ReasonAutoHealDisabled, ReasonNotNeeded,
		ReasonLearnerStranded, ReasonLearnerRolledBack} {
		if reasons[rs] == 0 {
			t.Errorf("no random input led to reason %q", rs)
		}
	}
	t.Logf("actions: %v", actions)
}

// invariants lists the safety rules d breaks for in.
func invariants(in Input, c Config, d Decision) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	o, j := in.Obs, in.Journal
	n := o.Voters()
	target, targetListed := o.Member(d.MemberID)
	dry := c.DryRun || in.Request != nil && in.Request.DryRun
	lost := o.MemberListError != "" || o.LeaderID == 0 || o.ServingVoters() < memberstate.Quorum(n)
	local, localListed := o.Member(o.Local.ID)
	localListed = localListed && o.Local.Match == observation.MatchOK
	localHealthy := localListed && local.Serving && observation.DataDirUsable(o.Local.DataDirClass)

	// (a) a removal targets a listed member that does not serve, and a
	// voter only if the healthy voters left keep a quorum of n-1.
	if d.Action == RemoveMember {
		switch {
		case !targetListed:
			fail("(a) removes %x, which is not listed", d.MemberID)
		case target.Serving:
			fail("(a) removes serving member %x", d.MemberID)
		case !target.IsLearner && healthyExcept(o, target.ID) < memberstate.Quorum(n-1):
			fail("(a) removal leaves %d healthy voters, quorum of %d is %d", healthyExcept(o, target.ID), n-1, memberstate.Quorum(n-1))
		}
	}
	if d.Action == RemoveStalledLearner && (!targetListed || !target.IsLearner) {
		fail("(a) removes %x as a stalled learner but it is not a listed learner", d.MemberID)
	}
	// (b) never act on a healthy local member without a manual request.
	if in.Request == nil && localHealthy {
		if d.Action == StopMember || d.Action == RemoveMember && d.MemberID == local.ID || d.Action == Begin && !j.Active() {
			fail("(b) %s on the healthy local member without a request", d.Action)
		}
	}
	// (c) one learner at a time, added only with a healthy quorum.
	if d.Action == AddLearner && (len(o.Learners()) > 0 || o.HealthyVoters() < memberstate.Quorum(n)) {
		fail("(c) adds a learner with %d learners and %d healthy of %d voters", len(o.Learners()), o.HealthyVoters(), n)
	}
	// (d) without quorum: nothing, refuse, close a journal not yet past the
	// stop, or (re)acquire the Lease to resume an open one.
	if lost {
		switch {
		case d.Action == Nothing || d.Action == Refuse:
		case d.Action == Finish && !j.Phase.AtLeast(record.PhaseStopped):
		case d.Action == Finish && j.Kind == record.KindRestoreClientURLs: // stops nothing; its restart is over or not made
		case d.Action == Begin && j.Active() && !in.LeaseHeld:
		default:
			fail("(d) %s without quorum", d.Action)
		}
		if in.LeaseHeld && j.Active() && j.Phase.AtLeast(record.PhaseStopped) && j.Kind != record.KindRestoreClientURLs && d.Reason != ReasonMajorityLost &&
			!(dry && strings.Contains(d.Detail, string(ReasonMajorityLost))) {
			fail("(d) mid-recovery without quorum, reason %q, want majority-lost", d.Reason)
		}
	}
	// (e) promote a serving learner within MaxLearnerLag of the leader.
	if d.Action == Promote {
		leader, ok := o.Member(o.LeaderID)
		switch {
		case !targetListed || !target.IsLearner || !target.Serving:
			fail("(e) promotes %x, not a serving learner", d.MemberID)
		case !ok:
			fail("(e) promotes without a known leader")
		case leader.RaftIndex > target.AppliedIndex && leader.RaftIndex-target.AppliedIndex > c.MaxLearnerLag:
			fail("(e) promotes a learner %d entries behind (max %d)", leader.RaftIndex-target.AppliedIndex, c.MaxLearnerLag)
		}
	}
	// (f) every refusal (and every wait) says why.
	if d.Action == Refuse && (d.Reason == ReasonNone || !slices.Contains(RefusalReasons(), d.Reason)) {
		fail("(f) refusal with reason %q, not one of RefusalReasons", d.Reason)
	}
	if (d.Action == Refuse || d.Reason != ReasonNone) && d.Detail == "" {
		fail("(f) %s/%q without a detail", d.Action, d.Reason)
	}
	// (g) only Begin without the Lease, and only with the API up and the Lease free.
	switch d.Action {
	case Nothing, Refuse:
	case Begin, RollbackLearner, BeginRestoreClientURLs:
		if !in.APIAvailable || in.LeaseHolder != "" {
			fail("(g) begins with API %v, Lease held by %q", in.APIAvailable, in.LeaseHolder)
		}
	default:
		if !in.LeaseHeld || !j.Active() {
			fail("(g) %s without the Lease (held %v) or an open journal (phase %q)", d.Action, in.LeaseHeld, j.Phase)
		}
	}
	// A stranded learner is rolled back only after the Lease was seen free
	// for a stall timeout.
	if d.Action == RollbackLearner && (in.LeaseFreeSince.IsZero() || in.Now.Sub(in.LeaseFreeSince) <= c.LearnerStallTimeout) {
		fail("rolls back a learner with the Lease free only since %s", in.LeaseFreeSince)
	}
	// The snapshot source is a serving voter, not the old member, that can
	// be streamed from.
	if d.Action == TakeSnapshot {
		src, ok := o.Member(d.SourceID)
		if !ok || !src.Serving || src.IsLearner || len(src.ClientURLs) == 0 || src.ID == uint64(j.OldMemberID) {
			fail("snapshot from %x (%+v): not a serving voter with a client URL other than the old member", d.SourceID, src)
		}
	}
	// Stopping the local member: only before the stop, never with another
	// learner or an ambiguous identity, and only if quorum survives it.
	if d.Action == StopMember {
		if j.Phase.AtLeast(record.PhaseStopped) || len(o.Learners()) > 0 || o.Local.Match == observation.MatchAmbiguous {
			fail("stops in phase %q with %d learners, match %s", j.Phase, len(o.Learners()), o.Local.Match)
		}
		if localListed && local.Serving && o.ServingVoters()-1 < memberstate.Quorum(n) {
			fail("stops a serving member leaving %d serving of %d", o.ServingVoters()-1, n)
		}
		if localHealthy && o.HealthyVoters()-1 < memberstate.Quorum(n) {
			fail("stops a healthy member leaving %d healthy of %d", o.HealthyVoters()-1, n)
		}
		// Rule 6's re-check: automatically, only a member still lost.
		if in.Request == nil && j.StopAttemptedAt.IsZero() && (in.Verdict.State != memberstate.Lost || localHealthy) {
			fail("stops without a request a member the tracker says is %s (healthy %v)", in.Verdict.State, localHealthy)
		}
	}
	// (h) a stranded learner: rolled back (idle) only by an agent that
	// wants to heal, with quorum, the Lease free, not a dry run, a listed
	// learner not ours, its clock past the stall timeout and not caught up;
	// removed only under an open rollback record naming it, Lease held.
	if d.Action == RollbackLearner {
		wanted := in.Request != nil || in.Verdict.State == memberstate.Lost && c.AutoHeal
		var clock time.Time
		for _, p := range in.Learners {
			if p.ID == d.MemberID {
				clock = p.Since
			}
		}
		leader, hasLeader := o.Member(o.LeaderID)
		caughtUp := hasLeader && target.Serving && (target.AppliedIndex >= leader.RaftIndex || leader.RaftIndex-target.AppliedIndex <= c.MaxLearnerLag)
		switch {
		case j.Active() || !wanted || dry || lost || localHealthy && in.Request == nil:
			fail("(h) rolls back: journal %q, wanted %v, dry %v, quorum lost %v, local healthy %v", j.Phase, wanted, dry, lost, localHealthy)
		case !targetListed || !target.IsLearner || slices.Contains(target.PeerURLs, localPeer):
			fail("(h) rolls back %+v: not a listed learner of another member", target)
		case clock.IsZero() || in.Now.Sub(clock) <= c.LearnerStallTimeout || caughtUp:
			fail("(h) rolls back learner %x with clock %s (stall timeout %s), caught up %v", d.MemberID, clock, c.LearnerStallTimeout, caughtUp)
		}
	}
	if j.Active() && j.Kind == record.KindRollbackLearner && !slices.Contains([]Action{Nothing, Refuse, Begin, Finish, RemoveStrandedLearner}, d.Action) {
		fail("(h) %s under a rollback record", d.Action)
	}
	if d.Action == RemoveStrandedLearner {
		// Under the rollback record naming it, or at our own rejoin's add
		// (past the snapshot, our old member gone) if it is stranded.
		atAdd := j.Kind == "" && j.Phase.AtLeast(record.PhaseSnapshotted) && !j.Phase.AtLeast(record.PhaseLearnerAdded)
		rollback := j.Kind == record.KindRollbackLearner && d.MemberID == uint64(j.LearnerID)
		var clock time.Time
		for _, p := range in.Learners {
			if p.ID == d.MemberID {
				clock = p.Since
			}
		}
		strandedNow := !clock.IsZero() && in.Now.Sub(clock) > c.LearnerStallTimeout && !slices.Contains(target.PeerURLs, localPeer)
		if !(rollback || atAdd && strandedNow) || !targetListed || !target.IsLearner || lost || !in.LeaseHeld {
			fail("(h) removes %x as stranded: record kind %q learner %x phase %q, stranded %v, listed learner %v, quorum lost %v, Lease held %v",
				d.MemberID, j.Kind, uint64(j.LearnerID), j.Phase, strandedNow, targetListed && target.IsLearner, lost, in.LeaseHeld)
		}
	}
	// A manual rejoin asked now is never answered "not needed"; a move (or
	// any other action) asked while an automatic recovery is open is not
	// that recovery's request, and rule 6 re-checks it as automatic.
	rejoinAsked := in.Request != nil && (in.Request.Action == "" || in.Request.Action == "rejoin")
	if d.Reason == ReasonNotNeeded && (d.Action != Finish || j.Phase != record.PhaseStarted || rejoinAsked && j.Kind == "") {
		fail("not-needed as %s in phase %q with request %v", d.Action, j.Phase, in.Request)
	}
	// A dry run changes nothing in any phase: no action but Nothing or
	// Refuse (Begin takes the Lease, whose holder then acts; Finish closes
	// the journal), and with an open journal a dry-run refusal naming the
	// phase.
	if dry && d.Action != Nothing && d.Action != Refuse {
		fail("dry run: %s (journal phase %q)", d.Action, j.Phase)
	}
	if dry && j.Active() && (d.Reason != ReasonDryRun || !strings.Contains(d.Detail, string(j.Phase))) {
		fail("dry run with an open journal: %s/%q %q does not report the phase %q", d.Action, d.Reason, d.Detail, j.Phase)
	}
	// A new recovery begins only when wanted, allowed and not a dry run.
	if d.Action == Begin && !j.Active() {
		wanted := in.Request != nil || in.Verdict.State == memberstate.Lost && c.AutoHeal
		if !wanted || dry || len(o.Learners()) > 0 || o.Local.Match == observation.MatchAmbiguous || localListed && local.IsLearner {
			fail("begins: wanted %v, dry run %v, %d learners, match %s", wanted, dry, len(o.Learners()), o.Local.Match)
		}
		need := AttemptBytesNeeded(maxDBSize(o), c.RejoinSeed, !in.DataDirOtherFS)
		if in.FreeBytes < need.Quarantine || in.DataDirOtherFS && in.DataDirFreeBytes < need.DataDir {
			fail("begins with %d bytes free (data dir's filesystem: %d, other %v), need %+v", in.FreeBytes, in.DataDirFreeBytes, in.DataDirOtherFS, need)
		}
	}
	// Adopt only a learner with our peer URL whose add's answer was lost.
	if d.Action == AdoptLearner {
		if !targetListed || !target.IsLearner || !slices.ContainsFunc(target.PeerURLs, func(u string) bool { return slices.Contains(j.PeerURLs, u) }) ||
			j.NewMemberID != 0 || target.Name != "" && target.Name != o.Local.Name {
			fail("adopts %+v with journal new ID %x", target, uint64(j.NewMemberID))
		}
	}
	// A learner's client URLs are set aside only at its add or start, where
	// the runtime can, and for a 3.5 learner.
	if d.AsideClientURLs && (d.Action != AddLearner && d.Action != StartMember || !in.CanSetClientURLsAside || !strings.HasPrefix(in.LearnerVersion, "3.5.")) {
		fail("sets the client URLs aside at %s (runtime can %v, learner %q)", d.Action, in.CanSetClientURLsAside, in.LearnerVersion)
	}
	// A restart on its own client URLs begins only with no recovery open,
	// unasked, for the local member serving healthy as a voter with its
	// URLs aside, and the other healthy voters a quorum.
	if d.Action == BeginRestoreClientURLs {
		if j.Active() || in.Request != nil || !in.ClientURLsAside || !targetListed || target.IsLearner || !target.Serving ||
			target.ID != o.Local.ID || in.Verdict.State != memberstate.Healthy || healthyExcept(o, target.ID) < memberstate.Quorum(o.Voters()) {
			fail("begins a restart on its own client URLs of %+v (journal active %v, request %v, aside %v, verdict %s, %d other healthy of %d voters)",
				target, j.Active(), in.Request != nil, in.ClientURLsAside, in.Verdict.State, healthyExcept(o, target.ID), o.Voters())
		}
	}
	// A member restarted on its own client URLs: ours, a voter, with the
	// Lease; while it serves, the other healthy voters keep a quorum.
	if d.Action == RestoreClientURLs {
		if !targetListed || target.IsLearner || d.MemberID != uint64(j.NewMemberID) || !in.ClientURLsAside || !in.LeaseHeld ||
			target.Serving && healthyExcept(o, target.ID) < memberstate.Quorum(o.Voters()) {
			fail("restores the client URLs of %+v (aside %v, Lease %v, %d other healthy of %d voters)", target, in.ClientURLsAside, in.LeaseHeld, healthyExcept(o, target.ID), o.Voters())
		}
	}
	if (d.Action == PrepareDataDir || d.Action == StartMember || d.Action == Verify || d.Action == RestoreClientURLs) && (!targetListed || d.MemberID != uint64(j.NewMemberID)) {
		fail("%s for %x, not the listed new member %x", d.Action, d.MemberID, uint64(j.NewMemberID))
	}
	return errs
}

// healthyExcept counts healthy voters other than except (the local member
// counts only with a usable data dir).
func healthyExcept(o observation.Observation, except uint64) int {
	n := 0
	for _, m := range o.Members {
		if m.IsLearner || !m.Serving || m.ID == except {
			continue
		}
		if o.Local.Match == observation.MatchOK && m.ID == o.Local.ID && !observation.DataDirUsable(o.Local.DataDirClass) {
			continue
		}
		n++
	}
	return n
}

// randomInput draws one input. The odds lean towards the interesting
// cases (quorum held, a lost member, an open journal) without excluding any.
func randomInput(r *rand.Rand) (Input, Config) {
	pick := func(p float64) bool { return r.Float64() < p }
	n := 1 + r.IntN(7)
	first := 1 // member 1 is the local member (by name and peer URL) ...
	if pick(0.35) {
		first = 2 // ... or removed: the voters are peers only
	}
	var ms []observation.Member
	for i := first; i < first+n; i++ {
		m := observation.Member{ID: id(i), Name: fmt.Sprintf("node%d", i), PeerURLs: []string{peer(i)},
			Serving: pick(0.75), RaftIndex: leaderIndex - r.Uint64N(3), AppliedIndex: leaderIndex - r.Uint64N(3),
			DBSize: r.Int64N(256 * mib)}
		if m.Serving && pick(0.95) {
			m.ClientURLs = []string{fmt.Sprintf("https://10.0.0.%d:2379", i)}
		}
		ms = append(ms, m)
	}
	if first == 1 && pick(0.2) { // member 1 is someone else
		ms[0].Name, ms[0].PeerURLs = "node11", []string{peer(11)}
	}
	if pick(0.04) { // someone else claims our name or peer URL
		k := r.IntN(n)
		if pick(0.5) {
			ms[k].Name = localName
		} else {
			ms[k].PeerURLs = []string{localPeer}
		}
	}
	if pick(0.45) { // our new member: a learner (unstarted, started), sometimes already promoted
		m := learner(18, []string{"", localName}[r.IntN(2)], localPeer, pick(0.7), leaderIndex-r.Uint64N(2500))
		m.IsLearner = pick(0.85)
		ms = append(ms, m)
	}
	if pick(0.15) { // someone else's learner
		ms = append(ms, learner(19, "node19", peer(19), pick(0.6), leaderIndex-r.Uint64N(3000)))
	}
	if pick(0.05) { // a learner of unknown origin with our peer URL, named or not
		ms = append(ms, learner(17, []string{"", localName, "node17"}[r.IntN(3)], localPeer, pick(0.6), leaderIndex))
	}
	var o observation.Observation
	o.At, o.ClusterID, o.Members = t0, 0xc1, ms
	if pick(0.9) {
		serving := slices.DeleteFunc(slices.Clone(ms), func(m observation.Member) bool { return m.IsLearner || !m.Serving })
		if len(serving) > 0 {
			o.LeaderID = serving[r.IntN(len(serving))].ID
			for i := range o.Members {
				if o.Members[i].ID == o.LeaderID {
					o.Members[i].IsLeader, o.Members[i].RaftIndex = true, leaderIndex
				}
			}
		}
	}
	if pick(0.05) {
		o.MemberListError = "etcdserver: no leader"
	}
	r.Shuffle(len(o.Members), func(a, b int) { o.Members[a], o.Members[b] = o.Members[b], o.Members[a] })
	classes := []string{"ok", "in-use", "missing", "empty", "corrupt", "foreign", "stale", "not-a-directory", ""}
	o.Local = observation.Local{Name: localName, PeerURLs: []string{localPeer}, DataDir: "/var/lib/etcd",
		DataDirClass: classes[r.IntN(len(classes))]}
	matchLocal(&o)
	if pick(0.05) { // whatever the watchdog says, Decide must stay safe
		o.Local.Match = []observation.Match{observation.MatchOK, observation.MatchAmbiguous, observation.MatchNotFound}[r.IntN(3)]
		o.Local.ID = o.Members[r.IntN(len(o.Members))].ID
		o.Local.MatchDetail = "forced " + string(o.Local.Match)
	}

	seed := pick(0.5)
	in := Input{Now: t0, Obs: o, APIAvailable: pick(0.85), LeaseHeld: pick(0.5), DataDirOtherFS: pick(0.2)}
	need := AttemptBytesNeeded(maxDBSize(o), seed, !in.DataDirOtherFS)
	in.FreeBytes, in.DataDirFreeBytes = need.Quarantine, need.DataDir
	if pick(0.05) && in.DataDirOtherFS {
		in.DataDirFreeBytes -= 1 + r.Uint64N(in.DataDirFreeBytes)
	}
	if pick(0.2) {
		in.LeaseHolder = "node2/node2"
	}
	if pick(0.7) {
		in.LeaseFreeSince = t0.Add(-time.Duration(r.Int64N(int64(20 * time.Minute))))
	}
	if pick(0.1) {
		in.FreeBytes -= 1 + r.Uint64N(in.FreeBytes)
	}
	// Only what the tracker gives: the executor passes its verdict as is
	// (Recovering is a display state of the agent, never an input).
	states := []memberstate.State{memberstate.Healthy, memberstate.Degraded, memberstate.Down, memberstate.Lost, memberstate.Learner}
	in.Verdict.State = states[r.IntN(len(states))]
	if pick(0.4) {
		in.Verdict.State = memberstate.Lost
	}
	in.Verdict.Reason, in.Verdict.Detail = string(in.Verdict.State), "the tracker says "+string(in.Verdict.State)
	switch x := r.IntN(100); {
	case x < 30:
		in.Request = &Request{Action: "rejoin"}
	case x < 37:
		in.Request = &Request{Action: "rejoin", DryRun: true}
	case x < 40:
		in.Request = &Request{Action: []string{"", "move"}[r.IntN(2)]}
	}
	ids := []uint64{0, id(1), id(17), id(18), id(99), o.Members[r.IntN(len(o.Members))].ID}
	j := record.Record{ID: "r", Member: localName, Request: "auto", PeerURLs: []string{localPeer},
		Phase: allPhases[r.IntN(len(allPhases))], OldMemberID: record.MemberID(id(1))}
	if pick(0.4) {
		j.OldMemberID = record.MemberID(ids[r.IntN(len(ids))])
	}
	switch x := r.IntN(4); {
	case x == 0:
		j.NewMemberID = record.MemberID(ids[r.IntN(len(ids))])
	case x < 3:
		j.NewMemberID = record.MemberID(id(18))
	}
	if pick(0.05) {
		j.PeerURLs = []string{peer(30)}
	}
	if pick(0.8) {
		j.LearnerProgressAt = t0.Add(-time.Duration(r.Int64N(int64(10 * time.Minute))))
	}
	if pick(0.2) {
		j.StopAttemptedAt = t0.Add(-time.Minute)
	}
	if pick(0.3) {
		j.Failures, j.LastFailureAt = 1+r.IntN(5), t0.Add(-time.Duration(r.Int64N(int64(20*time.Minute))))
	}
	if pick(0.1) { // a rollback record of a stranded learner
		j.Kind, j.LearnerID = record.KindRollbackLearner, record.MemberID([]uint64{id(19), id(18), id(17), id(99)}[r.IntN(4)])
	} else if pick(0.05) && j.Active() { // a restart of the local member on its own client URLs
		j.Kind, j.NewMemberID = record.KindRestoreClientURLs, record.MemberID(o.Local.ID)
		j.Phase = []record.Phase{record.PhaseStarted, record.PhaseVerified}[r.IntN(2)] // its only phases
	}
	in.Journal = j
	in.ClientURLsAside = pick(0.3)
	if in.ClientURLsAside && pick(0.5) { // a member left aside is mostly healthy: reach the restart's begin
		in.Obs.Local.DataDirClass = "ok"
	}
	in.CanSetClientURLsAside = pick(0.5)
	in.LearnerVersion = []string{"", "3.5.36", "3.6.16"}[r.IntN(3)]
	// The watchdog's learner clocks: most learners have one, from up to
	// 10 minutes ago (the stall timeout is 5 minutes).
	for _, m := range o.Learners() {
		if pick(0.8) {
			in.Learners = append(in.Learners, memberstate.LearnerProgress{ID: m.ID, Applied: m.AppliedIndex,
				Since: t0.Add(-time.Duration(r.Int64N(int64(10 * time.Minute))))})
		}
	}
	c := defaultConfig()
	c.AutoHeal, c.DryRun = pick(0.8), pick(0.1)
	c.MaxLearnerLag = []uint64{0, 1, 100, 1000, 5000}[r.IntN(5)]
	c.RejoinSeed = seed
	return in, c
}

func cloneInput(in Input) Input {
	out := in
	out.Obs.Members = slices.Clone(in.Obs.Members)
	for i, m := range out.Obs.Members {
		out.Obs.Members[i].PeerURLs = slices.Clone(m.PeerURLs)
		out.Obs.Members[i].ClientURLs = slices.Clone(m.ClientURLs)
	}
	out.Obs.Local.PeerURLs = slices.Clone(in.Obs.Local.PeerURLs)
	out.Journal.PeerURLs = slices.Clone(in.Journal.PeerURLs)
	out.Learners = slices.Clone(in.Learners)
	if in.Request != nil {
		r := *in.Request
		out.Request = &r
	}
	return out
}

func describe(in Input, c Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "leader=%x listErr=%q local={match=%s id=%x class=%q} verdict=%s request=%+v\n",
		in.Obs.LeaderID, in.Obs.MemberListError, in.Obs.Local.Match, in.Obs.Local.ID, in.Obs.Local.DataDirClass,
		in.Verdict.State, in.Request)
	for _, m := range in.Obs.Members {
		fmt.Fprintf(&b, "  member %x %q %v learner=%v serving=%v raft=%d applied=%d\n", m.ID, m.Name, m.PeerURLs,
			m.IsLearner, m.Serving, m.RaftIndex, m.AppliedIndex)
	}
	j := in.Journal
	fmt.Fprintf(&b, "  journal kind=%q learner=%x phase=%q old=%x new=%x peers=%v progress=%s failures=%d\n", j.Kind, uint64(j.LearnerID), j.Phase, uint64(j.OldMemberID),
		uint64(j.NewMemberID), j.PeerURLs, j.LearnerProgressAt, j.Failures)
	fmt.Fprintf(&b, "  learner clocks %+v\n", in.Learners)
	fmt.Fprintf(&b, "  api=%v held=%v holder=%q free=%d dataDirFree=%d otherFS=%v config=%+v", in.APIAvailable, in.LeaseHeld, in.LeaseHolder, in.FreeBytes, in.DataDirFreeBytes, in.DataDirOtherFS, c)
	return b.String()
}
